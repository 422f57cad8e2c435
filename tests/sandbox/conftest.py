"""Fixtures of the sandbox tests: base images (built once, cached) and managers."""

from __future__ import annotations

import shutil

import pytest

from termrl.sandbox import SandboxManager, build_base_images

BASE = "termrl/base:bookworm"


@pytest.fixture(scope="session")
def base_images() -> str:
    """Ensure the local base images exist (a no-op when current); returns the base tag."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    build_base_images()
    return BASE


@pytest.fixture
async def podman(base_images: str):
    """A podman-backed manager; closes whatever a test leaves open."""
    async with SandboxManager(backend="podman", output_limit=4096) as manager:
        yield manager
