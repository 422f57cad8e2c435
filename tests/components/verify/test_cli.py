"""``python -m components.verify`` on real sandboxes, with the embedded judge path.

A small part of the corpus (one good task, one whose no-op passes) through the
click command, with the ``local`` judge: an in-process ModelProxy serving the
tiny test model. That model's replies are noise, so every judge verdict must be
recorded as an error — and the stage must still finish and decide by the
required sandbox checks.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from components.verify.cli import verify
from termrl.artifacts import load_tasks, read_verdicts, save_tasks


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.ci
def test_cli_verifies_writes_both_artifacts_and_survives_judge_errors(
    corpus, base_images, tiny_model_dir, tmp_path
):
    tasks = [t for t in corpus if t.id in ("good-text-report", "bad-noop-passes")]
    save_tasks(tmp_path / "tasks.parquet", tasks)
    result = CliRunner().invoke(
        verify,
        [
            "--tasks",
            str(tmp_path / "tasks.parquet"),
            "--out",
            str(tmp_path / "verdicts.parquet"),
            "--admitted",
            str(tmp_path / "admitted.parquet"),
            "--repeats",
            "2",
            "--concurrency",
            "2",
            "--judges",
            "local",
            "--local-judge-model",
            str(tiny_model_dir),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "1 of 2 tasks admitted" in result.output and "rejected by noop: 1" in result.output
    rows = {r["task_id"]: r for r in read_verdicts(tmp_path / "verdicts.parquet").to_pylist()}
    assert rows["good-text-report"]["admitted"] and rows["good-text-report"]["reason"] == "admitted"
    assert rows["bad-noop-passes"]["reason"] == "noop" and rows["bad-noop-passes"]["noop_runs"] == [
        True,
        True,
    ]
    for row in rows.values():
        (judge,) = row["judges"]
        assert judge["model"] == "local" and judge["verdict"] == "error" and judge["error"]
        checks = json.loads(row["checks"])
        assert checks["judges"]["outcome"] == "error"
        assert set(checks) == {
            "flakiness",
            "ground_truth",
            "noop",
            "ablation",
            "state_replay",
            "judges",
        }
        assert all(c["seconds"] >= 0 and c["reason"] for c in checks.values())
    assert [t.id for t in load_tasks(tmp_path / "admitted.parquet")] == ["good-text-report"]


def test_cli_reports_every_config_problem_at_once(tmp_path):
    save_tasks(tmp_path / "tasks.parquet", [])
    result = CliRunner().invoke(
        verify,
        [
            "--tasks",
            str(tmp_path / "tasks.parquet"),
            "--out",
            str(tmp_path / "same.parquet"),
            "--admitted",
            str(tmp_path / "same.parquet"),
            "--repeats",
            "0",
            "--require",
            "noop,vibes",
        ],
    )
    assert result.exit_code != 0
    for problem in (
        "out and admitted must be different",
        "repeats must be >= 1",
        "unknown check(s) vibes",
    ):
        assert problem in result.output
