"""Fixtures of the rollout tests: the local base image (built only when missing)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

BASE = "termrl/base:bookworm"


@pytest.fixture(scope="session")
def base_image() -> str:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    if subprocess.run(["podman", "image", "exists", BASE]).returncode != 0:
        from termrl.sandbox import build_base_images

        build_base_images()
    return BASE
