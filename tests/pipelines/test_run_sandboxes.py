"""A stopped ``termrl run`` stops the stage that runs now (issue 40), on kfp's real local runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A one-stage pipeline whose stage records its pid and then runs for ten minutes.
RUN = r"""
import sys
from kfp import dsl
from pipelines.local import run_pipeline_locally

@dsl.component(base_image="python:3.11")
def linger(pid_file: str):
    import os, time
    open(pid_file, "w").write(str(os.getpid()))
    time.sleep(600)

@dsl.pipeline(name="linger")
def pipeline(pid_file: str = ""):
    linger(pid_file=pid_file)

run_pipeline_locally(pipeline, {"pid_file": sys.argv[1]}, run_dir=sys.argv[2], cache_dir=sys.argv[3])
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_run_alone_ends_the_running_stage_too(tmp_path, sig):
    pid_file = tmp_path / "stage.pid"
    script = tmp_path / "run.py"  # kfp reads a component's source from its file
    script.write_text(RUN)
    run = subprocess.Popen(
        [sys.executable, script, pid_file, tmp_path / "run", tmp_path / "cache"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # the signal reaches the run alone, not its process group
    )
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            assert run.poll() is None, "the run ended before its stage started"
            time.sleep(0.2)
        stage = int(pid_file.read_text())
        assert _alive(stage)
        run.send_signal(sig)
        run.wait(timeout=30)
        assert run.returncode != 0
        deadline = time.monotonic() + 10
        while _alive(stage) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(stage), "the stage outlived the run"
    finally:
        os.killpg(run.pid, signal.SIGKILL) if run.poll() is None else None
        if pid_file.exists() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
