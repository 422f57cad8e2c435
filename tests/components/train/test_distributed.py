"""FSDP2 with two CPU processes (torchrun, gloo): same losses as one process, resumable.

Both runs take 4 episodes per optimizer step (1 process × 4 micro-batches vs
2 processes × 2), so the planned steps and their normalisation are identical
and only the summation order of the gradients differs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from components.train.config import TrainConfig
from components.train.trainer import train
from termrl.artifacts.metrics import read_train_metrics

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(traj: Path, model: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
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
        "--lr",
        "1e-3",
        "--grad-accum-steps",
        "2",
        "--epochs",
        "2",
        "--save-every-steps",
        "2",
        "--no-progress",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow
@pytest.mark.ci
def test_fsdp2_two_processes_match_one_and_resume(tiny_model_dir, toy_trajectories, tmp_path):
    result = torchrun(toy_trajectories, tiny_model_dir, tmp_path / "fsdp")
    assert result.stdout.count("trained 4 step(s)") == 1  # one summary, from rank 0
    single = tmp_path / "single"
    train(
        TrainConfig(
            trajectories=str(toy_trajectories),
            model=str(tiny_model_dir),
            out=str(single),
            mode="full",
            learning_rate=1e-3,
            grad_accum_steps=4,
            epochs=2,
            save_every_steps=0,
            progress=False,
        )
    )
    sharded = read_train_metrics(tmp_path / "fsdp" / "train_metrics.parquet").to_pylist()
    one = read_train_metrics(single / "train_metrics.parquet").to_pylist()
    assert len(sharded) == len(one) == 4
    for a, b in zip(sharded, one, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["optim/grad_norm"] == pytest.approx(b["optim/grad_norm"], rel=1e-3)
        assert a["advantage/positive"] == b["advantage/positive"]
    # the merged checkpoint written from sharded weights loads as a plain model
    AutoModelForCausalLM.from_pretrained(tmp_path / "fsdp")

    # stop after 2 steps, then resume to 4 under FSDP2: sharded optimizer state round-trips
    torchrun(toy_trajectories, tiny_model_dir, tmp_path / "halves", "--max-steps", "2")
    torchrun(toy_trajectories, tiny_model_dir, tmp_path / "halves", "--max-steps", "4", "--resume")
    halves = read_train_metrics(tmp_path / "halves" / "train_metrics.parquet").to_pylist()
    assert [r["step"] for r in halves] == [1, 2, 3, 4]
    for a, b in zip(halves, sharded, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-7)
