"""Partial progress kept where a retried task's new pod finds it (``components.progress``)."""

from __future__ import annotations

from components.demonstrate.config import DemonstrateConfig
from components.eval.config import EvalConfig
from components.progress import move_onto, progress_folder
from components.rollout.config import RolloutConfig


def test_every_attempt_of_a_task_gets_the_same_folder_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path / "pvc"))
    uri = "minio://mlpipeline/v2/artifacts/curriculum/run-1/rollout/trajectories"
    first = progress_folder("rollout", uri)
    assert first == progress_folder("rollout", uri)  # a retry: a new pod, the same output URI
    assert first.is_relative_to(tmp_path / "pvc" / "progress" / "rollout")
    assert progress_folder("rollout", uri + "-2") != first  # another task
    assert progress_folder("eval", uri) != first


def test_the_stages_resume_from_the_folder_they_are_given(tmp_path):
    elsewhere = tmp_path / "cache" / "x"
    assert RolloutConfig(out=tmp_path / "t.parquet", parts=elsewhere).parts_dir == elsewhere
    assert RolloutConfig(out=tmp_path / "t.parquet").parts_dir == tmp_path / "t.parquet.parts"
    assert (
        EvalConfig(out=str(tmp_path / "r.parquet"), parts=str(elsewhere)).parts_dir() == elsewhere
    )
    assert DemonstrateConfig(out=tmp_path / "d.parquet", parts=elsewhere).parts_dir == elsewhere


def test_move_onto_replaces_the_empty_output_path_kfp_made(tmp_path):
    work = tmp_path / "cache" / "progress" / "train" / "abc"
    (work / "checkpoints" / "step-000002").mkdir(parents=True)
    (work / "config.json").write_text("{}")
    (work / "checkpoints" / "step-000002" / "model.safetensors").write_bytes(b"w" * 10)
    artifact = tmp_path / "root" / "train" / "checkpoint"
    artifact.mkdir(parents=True)  # kfp may create the output path before the task runs

    move_onto(work, str(artifact))

    assert not work.exists()
    assert (artifact / "config.json").read_text() == "{}"
    assert (
        artifact / "checkpoints" / "step-000002" / "model.safetensors"
    ).read_bytes() == b"w" * 10


def test_move_onto_creates_a_missing_output_path(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "f").write_text("x")
    move_onto(work, str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b" / "f").read_text() == "x" and not work.exists()
