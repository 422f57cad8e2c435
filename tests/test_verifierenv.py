"""What crosses to a separate verifier: collect commands' output and the declared artifacts, nothing else."""

from __future__ import annotations

import pytest

from termrl.artifacts.tasks import Task
from termrl.sandbox import SandboxSpec
from termrl.verifierenv import collect_artifacts

pytestmark = pytest.mark.podman


async def test_artifacts_are_regular_files_under_the_declared_paths(podman, base_images):
    task = Task(
        id="t",
        instruction="x",
        verifier_mode="separate",
        verifier_collect=[
            {"command": "mkdir -p /logs/artifacts && echo 7 > /logs/artifacts/n"},
            {"command": "exit 3"},
        ],  # a failing one is logged; the rest still cross
        artifacts=[{"source": "/app/out", "exclude": ["*.tmp"]}, {"source": "/app/one.txt"}],
    )
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        await session.exec(
            "mkdir -p /app/out/sub && echo a > /app/out/a && echo t > /app/out/x.tmp"
            " && echo b > /app/out/sub/b && chmod 4755 /app/out/sub/b && ln -s /etc/shadow /app/out/s"
            " && mkfifo /app/out/pipe && echo 1 > /app/one.txt && echo no > /app/other"
        )
        files = {f.path: f for f in await collect_artifacts(session, task)}
    assert sorted(files) == ["app/one.txt", "app/out/a", "app/out/sub/b", "logs/artifacts/n"]
    assert files["app/out/a"].data == b"a\n" and files["logs/artifacts/n"].data == b"7\n"
    assert files["app/out/sub/b"].mode == 0o755  # no setuid bit crosses
