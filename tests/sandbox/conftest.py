"""Fixtures of the sandbox tests: managers with a small output cap (base images: tests/conftest.py)."""

from __future__ import annotations

import os

import pytest

from termrl.sandbox import SandboxManager
from tests.sandbox.servers import host_address


@pytest.fixture
async def podman(base_images: str):
    """A podman-backed manager; closes whatever a test leaves open."""
    async with SandboxManager(backend="podman", output_limit=4096) as manager:
        yield manager


@pytest.fixture(params=["podman", "bwrap"])
async def local(request, base_images: str):
    """A manager of each local backend in turn (bwrap skipped where not root)."""
    if request.param == "bwrap" and os.geteuid() != 0:
        pytest.skip("the bwrap backend needs root")
    async with SandboxManager(backend=request.param, output_limit=8192) as manager:
        yield manager


@pytest.fixture
def host() -> str:
    """A global IPv4 address of this host: where a server stands in for the outside world."""
    address = host_address()
    if address is None:
        pytest.skip("this host has no global IPv4 address to serve on")
    return address
