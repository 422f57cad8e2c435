"""A stopped stage takes its sandboxes with it (issue 40): SIGTERM to a running rollout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from termrl.artifacts import save_tasks
from termrl.sandbox.base_images import cache_root
from termrl.sandbox.warden import LEASE_LABEL, lease_of

from .policy import word_task

pytestmark = pytest.mark.podman

ROOT = Path(__file__).resolve().parents[3]


def _containers(lease: str) -> list[str]:
    return subprocess.run(
        ["podman", "ps", "-a", "-q", "--filter", f"label={LEASE_LABEL}={lease}"],
        capture_output=True,
        text=True,
    ).stdout.split()


def _roots(lease: str) -> list[Path]:
    """Session roots termrl mounted for the owner (rootful podman), still there."""
    roots = Path(cache_root()) / "sandbox" / "podman" / "roots"
    return [f.parent for f in roots.glob("*/owner") if f.read_text() == lease]


def _wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_sigterm_ends_a_running_rollout_within_seconds_and_its_sandboxes_with_it(
    base_image, tiny_model_dir, tmp_path
):
    tasks = tmp_path / "tasks.parquet"
    save_tasks(tasks, [word_task(f"sig-{w}", w) for w in ("ant", "bee", "cat", "dog")])
    config = tmp_path / "rollout.yaml"
    # Many long episodes, so that sandboxes are open whenever the signal comes.
    config.write_text(
        yaml.safe_dump(
            {
                "group_size": 2,
                "groups": 8,
                "concurrency": 4,
                "max_turns": 40,
                "max_new_tokens": 24,
                "context_window": 2048,
                "exec_timeout_sec": 10.0,
            }
        )
    )
    stage = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "components.rollout",
            "--tasks",
            str(tasks),
            "--model",
            str(tiny_model_dir),
            "--out",
            str(tmp_path / "trajectories.parquet"),
            "--config",
            str(config),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        lease = lease_of(stage.pid)
        if not _wait_for(lambda: _containers(lease) or stage.poll() is not None, 300):
            pytest.fail("the rollout opened no sandbox in 300 s")
        assert stage.poll() is None, stage.stdout.read().decode(errors="replace")[-3000:]
        signalled = time.monotonic()
        stage.send_signal(signal.SIGTERM)
        stage.wait(timeout=60)
        assert time.monotonic() - signalled < 15
        assert stage.returncode != 0  # stopped, not finished
        assert _wait_for(lambda: not _containers(lease) and not _roots(lease), 10), (
            _containers(lease),
            _roots(lease),
        )
    finally:
        if stage.poll() is None:
            stage.kill()
            stage.wait()
