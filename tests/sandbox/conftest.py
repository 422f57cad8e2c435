"""Fixtures of the sandbox tests: a manager with a small output cap (base images: tests/conftest.py)."""

from __future__ import annotations

import pytest

from termrl.sandbox import SandboxManager


@pytest.fixture
async def podman(base_images: str):
    """A podman-backed manager; closes whatever a test leaves open."""
    async with SandboxManager(backend="podman", output_limit=4096) as manager:
        yield manager
