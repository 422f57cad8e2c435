"""Fixtures of the synthesize tests: a podman sandbox manager on the local base images."""

from __future__ import annotations

import shutil

import pytest

from termrl.sandbox import SandboxManager, build_base_images


@pytest.fixture(scope="session")
def base_images() -> None:
    """The local base images (built once, a no-op when current); skips where podman is missing."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    build_base_images()


@pytest.fixture
async def podman(base_images: None):
    """A podman-backed manager; closes whatever a test leaves open."""
    async with SandboxManager(backend="podman", output_limit=8192) as manager:
        yield manager
