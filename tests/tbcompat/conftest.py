"""Fixtures of the tbcompat tests: the local base images the stand-ins need (built once, cached)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

TB_FIXTURES = Path(__file__).parents[1] / "fixtures" / "terminal-bench"


@pytest.fixture(scope="session")
def base_images() -> None:
    """Ensure every ``BASE_IMAGES`` recipe is built and current (a no-op when it is)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from termrl.sandbox import build_base_images

    build_base_images()
