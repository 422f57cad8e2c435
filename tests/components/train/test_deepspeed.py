"""DeepSpeed ZeRO-2/3 with two CPU processes (gloo): same losses as one process, resumable.

DeepSpeed is an optional extra (``termrl[deepspeed]``, installed with
``DS_BUILD_OPS=0``); on CPU it builds a small C++ comm op on first use, cached
under ``$TERMRL_CACHE/torch_extensions``.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from components.train.config import TrainConfig
from components.train.trainer import train
from termrl.artifacts.metrics import read_train_metrics
from termrl.llm.models import cache_root

from .test_distributed import torchrun

pytest.importorskip("deepspeed")


@pytest.mark.slow
def test_deepspeed_zero_matches_single_process_and_resumes(
    tiny_model_dir, toy_trajectories, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(cache_root() / "torch_extensions"))
    ds = ("--set", "distributed=deepspeed", "--set", "deepspeed_zero_stage=2")
    torchrun(toy_trajectories, tiny_model_dir, tmp_path / "ds", *ds)
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
    got = read_train_metrics(tmp_path / "ds" / "train_metrics.parquet").to_pylist()
    want = read_train_metrics(single / "train_metrics.parquet").to_pylist()
    assert len(got) == len(want) == 4
    for a, b in zip(got, want, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
        assert a["optim/grad_norm"] == pytest.approx(b["optim/grad_norm"], rel=1e-3)
    assert (tmp_path / "ds" / "training_state" / "deepspeed").is_dir()

    torchrun(toy_trajectories, tiny_model_dir, tmp_path / "halves", "--max-steps", "2", *ds)
    torchrun(
        toy_trajectories, tiny_model_dir, tmp_path / "halves", "--max-steps", "4", "--resume", *ds
    )
    halves = read_train_metrics(tmp_path / "halves" / "train_metrics.parquet").to_pylist()
    assert [r["step"] for r in halves] == [1, 2, 3, 4]
    for a, b in zip(halves, got, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=1e-7)

    # ZeRO-3 partitions the weights themselves; the checkpoint gathers them into a loadable model
    torchrun(
        toy_trajectories,
        tiny_model_dir,
        tmp_path / "z3",
        "--set",
        "distributed=deepspeed",
        "--set",
        "deepspeed_zero_stage=3",
    )
    zero3 = read_train_metrics(tmp_path / "z3" / "train_metrics.parquet").to_pylist()
    assert [r["loss"] for r in zero3] == pytest.approx([r["loss"] for r in got], rel=1e-4, abs=1e-6)
    merged = load_file(tmp_path / "z3" / "model.safetensors")
    reference = load_file(tmp_path / "ds" / "model.safetensors")
    assert merged.keys() == reference.keys()
    assert all(torch.allclose(merged[k], reference[k], atol=1e-5) for k in merged)
