"""Crash and resume: a real training process is killed mid-run and restarted with --resume.

The resumed run must produce exactly the losses an uninterrupted run produces
for every step after the checkpoint it restarts from.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.train.checkpoint import latest_checkpoint
from components.train.config import TrainConfig
from components.train.trainer import train
from termrl.artifacts.metrics import read_train_metrics

from .conftest import write_toy_set

REPO = Path(__file__).resolve().parents[3]
STEPS = 40


def command(traj: Path, model: Path, out: Path, finetune: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "components.train",
        "--trajectories",
        str(traj),
        "--model",
        str(model),
        "--out",
        str(out),
        "--mode",
        "full",
        "--finetune",
        finetune,
        "--lr",
        "1e-3",
        "--micro-batch-size",
        "1",
        "--grad-accum-steps",
        "2",
        "--epochs",
        "10",
        "--max-steps",
        str(STEPS),
        "--save-every-steps",
        "2",
        "--no-progress",
        "--set",
        "warmup_steps=3",
        "--set",
        "schedule=cosine",
        *extra,
    ]


@pytest.mark.slow
@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_kill_and_resume_matches_uninterrupted(tiny_model_dir, tmp_path, finetune):
    traj = write_toy_set(tmp_path / "t.parquet", tiny_model_dir, groups=2, per_group=4)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        command(traj, tiny_model_dir, out, finetune),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300
    while latest_checkpoint(out) is None:
        if process.poll() is not None:
            pytest.fail(
                "training ended before its first checkpoint:\n" + process.stdout.read().decode()
            )
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("no checkpoint within 300 s")
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "config.json").exists(), (
        "the run finished before it was killed; the test proves nothing"
    )
    restart_from = latest_checkpoint(out)
    done_before = int(restart_from.name.split("-")[1])
    assert done_before < STEPS

    resumed = subprocess.run(
        command(traj, tiny_model_dir, out, finetune, "--resume"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"trained {STEPS} step(s)" in resumed.stdout
    assert f"resumed at step {done_before}" in resumed.stdout

    reference = tmp_path / "reference"
    train(
        TrainConfig(
            trajectories=str(traj),
            model=str(tiny_model_dir),
            out=str(reference),
            mode="full",
            finetune=finetune,
            learning_rate=1e-3,
            micro_batch_size=1,
            grad_accum_steps=2,
            epochs=10,
            max_steps=STEPS,
            save_every_steps=0,
            progress=False,
            warmup_steps=3,
            schedule="cosine",
        )
    )
    got = read_train_metrics(out / "train_metrics.parquet").to_pylist()
    want = read_train_metrics(reference / "train_metrics.parquet").to_pylist()
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    for mine, theirs in zip(got, want, strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-6, abs=1e-7), mine["step"]
        assert mine["optim/lr"] == pytest.approx(theirs["optim/lr"])
        assert mine["optim/grad_norm"] == pytest.approx(theirs["optim/grad_norm"], rel=1e-5)
    # the very next step after the restart point, spelled out
    assert got[done_before]["loss"] == pytest.approx(want[done_before]["loss"], rel=1e-6, abs=1e-7)
