"""Run summary, grouped tables and metric names on hand-checked rows."""

from __future__ import annotations

import pytest

from components.eval.summary import flat_metrics, group_table, summarize, task_table
from termrl.artifacts.eval_results import read_eval_results

from .rows import sample_rows, written


@pytest.fixture
def rows(tmp_path):
    # Round-trip through the real artifact so the summary reads what eval writes.
    return read_eval_results(written(tmp_path, sample_rows())).to_pylist()


def test_summary(rows) -> None:
    s = summarize(rows)
    assert (s["tasks"], s["trials"], s["passed"]) == (3, 6, 3)
    assert s["accuracy"] == pytest.approx(0.5)
    # per task (n=2): hello c=2 -> 1; csv c=1 -> pass@1 0.5, pass@2 1 - C(1,2)/C(2,2) = 1; tar c=0 -> 0
    assert s["pass@1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert s["pass@2"] == pytest.approx((1 + 1 + 0) / 3)
    assert s["over_budget"] == 1
    assert s["failure_modes"]["invalid-loop"] == 1
    assert s["failure_modes"]["timeout"] == 1
    assert s["failure_modes"]["environment-error"] == 1
    assert s["failure_modes"]["wrong-result"] == 0
    # means leave out the environment-error trial: turns (2+4+2+10+2)/5
    assert s["mean_turns"] == pytest.approx(4.0)
    assert s["mean_tokens"] == pytest.approx((120 * 4 + 1000) / 5)
    # calls: 2 + 5 + 2 + 10 + 2 + 0 = 21 over 2+4+2+10+2+0 = 20 agent turns
    assert s["tool_calls"] == 21
    assert s["calls_per_turn"] == pytest.approx(21 / 20)
    assert s["read_only_calls"] == 1 + 4 + 1 + 0 + 1 + 0
    assert s["state_changing_calls"] == 21 - 7
    assert s["parallel_turns"] == 1


def test_group_tables(rows) -> None:
    by_family = {r["family"]: r for r in group_table(rows, "family")}
    assert set(by_family) == {"files", "data", "archives"}
    assert by_family["files"]["pass_rate"] == 1.0
    assert by_family["data"]["pass_rate"] == 0.5
    assert by_family["data"]["pass@2"] == 1.0
    assert by_family["archives"]["trials"] == 2 and by_family["archives"]["pass_rate"] == 0.0
    by_difficulty = {r["difficulty"]: r for r in group_table(rows, "difficulty")}
    assert by_difficulty["medium"]["pass@1"] == 0.5


def test_task_table(rows) -> None:
    tasks = {r["task_id"]: r for r in task_table(rows)}
    assert tasks["csv"]["passed"] == 1 and tasks["csv"]["failure_modes"] == "invalid-loop ×1"
    assert tasks["tar"]["over_budget"] == 1
    assert tasks["hello"]["mean_turns"] == 3.0


def test_flat_metrics(rows) -> None:
    metrics = flat_metrics(summarize(rows))
    assert metrics["eval/accuracy"] == 0.5
    assert metrics["eval/failure/timeout"] == 1.0
    assert "eval/run_id" not in metrics
    assert all(isinstance(v, float) for v in metrics.values())
