"""Partial progress kept where a retried task's new pod finds it (``components.progress``)."""

from __future__ import annotations

from components.demonstrate.config import DemonstrateConfig
from components.eval.config import EvalConfig
from components.progress import progress_folder
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
