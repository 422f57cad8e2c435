"""dockerfile: FROM names read and rewritten for the build; ARGs that stay out of the image."""

from __future__ import annotations

import pytest

from termrl.sandbox.dockerfile import base_refs, declare_build_args, rewrite_from

MULTI_STAGE = """\
# syntax=docker/dockerfile:1
ARG BASE=debian:bookworm
FROM --platform=linux/amd64 ghcr.io/laude-institute/t-bench/python-3-13:20250620 AS build
RUN pip install build
FROM build
FROM $BASE
from scratch
FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620
COPY --from=build /app /app
"""


def test_base_refs_skip_stages_scratch_args_and_repeats():
    assert base_refs(MULTI_STAGE) == ["ghcr.io/laude-institute/t-bench/python-3-13:20250620"]
    assert base_refs("FROM python:3.13-slim\nRUN true\nFROM ubuntu:24.04 as final\n") == [
        "python:3.13-slim",
        "ubuntu:24.04",
    ]


def test_rewrite_from_changes_only_the_recorded_names():
    rewrites = {"ghcr.io/laude-institute/t-bench/python-3-13:20250620": "termrl/standin:trixie"}
    out = rewrite_from(MULTI_STAGE, rewrites)
    assert "FROM --platform=linux/amd64 termrl/standin:trixie AS build\n" in out
    assert out.endswith("FROM termrl/standin:trixie\nCOPY --from=build /app /app\n")
    assert "ARG BASE=debian:bookworm\n" in out and "FROM $BASE\n" in out and "from scratch\n" in out
    assert rewrite_from(MULTI_STAGE, {}) == MULTI_STAGE
    # Nothing else moves: undoing the rewrite gives the original text back.
    assert rewrite_from(out, {v: k for k, v in rewrites.items()}) == MULTI_STAGE


def test_build_args_follow_every_complete_from_line():
    text = "FROM a:1\nRUN uv pip install x\nFROM b:2 \\\n  AS c\nRUN true\n"
    out = declare_build_args(text, {"UV_NATIVE_TLS": "1"})
    assert (
        out
        == "FROM a:1\nARG UV_NATIVE_TLS=1\nRUN uv pip install x\nFROM b:2 \\\n  AS c\nRUN true\n"
    )
    assert declare_build_args(text, {}) == text


@pytest.mark.slow
@pytest.mark.podman
async def test_uv_installs_from_pypi_during_a_build_and_leaves_no_trace(base_images):
    """uv ignores the system CA store unless UV_NATIVE_TLS is set; the build sets it as an ARG."""
    import subprocess

    from termrl.artifacts.tasks import TaskFile
    from termrl.sandbox import SandboxManager, SandboxSpec

    dockerfile = (
        b"FROM python:3.13-slim\n"
        b"RUN pip install --no-cache-dir uv==0.7.13 && uv pip install --system --no-cache iniconfig==2.0.0\n"
    )
    task_files = [TaskFile("Dockerfile", dockerfile)]
    async with SandboxManager() as manager:
        image = await manager.build_image(SandboxSpec(environment_files=task_files))
    inspect = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{json .Config.Env}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "UV_NATIVE_TLS" not in inspect.stdout
    check = subprocess.run(
        ["podman", "run", "--rm", "--network=none", image, "python", "-c", "import iniconfig"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr


def test_base_platforms_names_the_platform_each_base_is_asked_for():
    from termrl.sandbox.dockerfile import base_platforms

    assert base_platforms(MULTI_STAGE) == {
        "ghcr.io/laude-institute/t-bench/python-3-13:20250620": "linux/amd64"
    }
    assert base_platforms("FROM --platform=$BUILDPLATFORM python:3.11 AS b\nFROM b\n") == {
        "python:3.11": "$BUILDPLATFORM"
    }
    assert base_platforms("FROM python:3.11\n") == {}
