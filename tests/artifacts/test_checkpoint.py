"""The checkpoint folder's layout is declared once; train's step checkpoints and health read it."""

from __future__ import annotations

import json

import pytest

from termrl.artifacts.checkpoint import CheckpointFolder, read_train_state
from termrl.errors import ArtifactError


def test_the_layout_of_a_train_output_folder(tmp_path):
    folder = CheckpointFolder(tmp_path)
    assert folder.train_metrics == tmp_path / "train_metrics.parquet"
    assert folder.state_file == tmp_path / "training_state" / "state.json"
    assert folder.adapter == tmp_path / "training_state" / "adapter"
    assert folder.rng(1) == tmp_path / "training_state" / "rng-rank1.pt"
    step = folder.step(10)
    assert step.root == tmp_path / "checkpoints" / "step-000010"
    assert step.state_file == step.root / "training_state" / "state.json"


def test_only_step_checkpoints_with_their_state_file_are_complete(tmp_path):
    folder = CheckpointFolder(tmp_path)
    assert folder.steps() == []
    for n in (20, 10, 30):
        folder.step(n).state_dir.mkdir(parents=True)
    for n in (10, 20):  # step 30 was killed before its state file: not complete
        folder.step(n).state_file.write_text(json.dumps({"step": n}))
    assert [c.root.name for c in folder.steps()] == ["step-000010", "step-000020"]


def test_the_train_state_is_read_with_a_clear_error(tmp_path):
    folder = CheckpointFolder(tmp_path)
    with pytest.raises(ArtifactError, match="unreadable train state"):
        read_train_state(tmp_path)
    folder.state_dir.mkdir()
    folder.state_file.write_text(json.dumps({"step": 3, "config": {"mode": "full"}}))
    assert read_train_state(tmp_path)["config"] == {"mode": "full"}
    folder.state_file.write_text("[1]")
    with pytest.raises(ArtifactError, match="not a JSON object"):
        read_train_state(tmp_path)
