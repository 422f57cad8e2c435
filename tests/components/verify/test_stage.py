"""The verify stage end to end on real podman sandboxes: the planted-defect corpus.

Every task of ``corpus/`` carries one planted defect (or none); the stage must
reject each defective task *for that defect* and admit the good ones. The
test prints precision and recall (rejection as the positive class) and how
many rejections named the right check.

Why K=5 and not the default 3: the flaky task's tests pass on a coin toss, with
the solution and without it. Independent runs cannot be forced to disagree;
the chance that K runs all agree is 2·(1/2)^K per check, so flakiness goes
unseen in both the ground-truth and no-op runs with probability (2/2^K)^2:
1/16 at K=3, 1/256 at K=5. A test of our own must not be that flaky.
"""

from __future__ import annotations

import pytest

from components.verify.config import VerifyConfig
from components.verify.stage import main
from termrl.artifacts import load_tasks, read_verdicts, save_tasks

from .conftest import planted_defect

pytestmark = [pytest.mark.podman, pytest.mark.slow]


def scores(expected: dict[str, str], rows: list[dict]) -> dict[str, float]:
    """Precision and recall of "rejected" against "has a planted defect", and reason accuracy."""
    defective = {task for task, defect in expected.items() if defect != "none"}
    rejected = {r["task_id"] for r in rows if not r["admitted"]}
    caught = rejected & defective
    right = {
        r["task_id"]
        for r in rows
        if r["task_id"] in defective and r["reason"] == expected[r["task_id"]]
    }
    return {
        "precision": len(caught) / len(rejected) if rejected else 1.0,
        "recall": len(caught) / len(defective) if defective else 1.0,
        "right_reason": len(right) / len(defective) if defective else 1.0,
    }


def test_corpus_is_rejected_task_by_task_for_the_planted_reason(
    corpus, base_images, tmp_path, capsys
):
    expected = {t.id: planted_defect(t) for t in corpus}
    assert sum(d == "none" for d in expected.values()) >= 2
    assert {"ground_truth", "noop", "ablation", "flakiness", "state_replay"} <= set(
        expected.values()
    )
    save_tasks(tmp_path / "tasks.parquet", corpus)
    config = VerifyConfig(
        tasks=str(tmp_path / "tasks.parquet"),
        out=str(tmp_path / "verdicts.parquet"),
        admitted=str(tmp_path / "admitted.parquet"),
        repeats=5,
        judges=(),
        progress=False,
    )
    main(config)
    printed = capsys.readouterr().out
    rows = read_verdicts(config.out).to_pylist()
    by_id = {r["task_id"]: r for r in rows}
    measured = scores(expected, rows)
    with capsys.disabled():
        print(f"\nverify corpus ({len(rows)} tasks, K=5):")
        for task_id in sorted(by_id):
            row = by_id[task_id]
            print(f"  {task_id:24s} planted={expected[task_id]:13s} -> {row['reason']}")
        print(
            "  precision {precision:.2f}  recall {recall:.2f}  right reason {right_reason:.2f}".format(
                **measured
            )
        )
    assert {task: row["reason"] for task, row in by_id.items()} == {
        task: "admitted" if defect == "none" else defect for task, defect in expected.items()
    }
    assert measured == {"precision": 1.0, "recall": 1.0, "right_reason": 1.0}
    # the artifact says *what* was found, not only that something was
    unchecked = by_id["bad-unchecked-step"]
    assert unchecked["unchecked_steps"] == ["chmod +x /app/report.sh"]
    assert by_id["bad-flaky-tests"]["flaky"] is True
    assert by_id["bad-noop-passes"]["noop_runs"] == [True] * 5
    assert by_id["bad-solution-fails"]["ground_truth_runs"] == [False] * 5
    assert by_id["bad-process-as-file"]["state_replay_passed"] is True
    assert by_id["good-heartbeat-service"]["state_replay_passed"] is False
    assert by_id["good-text-report"]["state_replay_passed"] is True  # a file task: fine
    # A file task whose instruction names a `server` section: a value, not a process.
    assert by_id["good-config-lookup"]["state_replay_passed"] is True
    for good in ("good-text-report", "good-heartbeat-service", "good-config-lookup"):
        probes = by_id[good]["ablation"]
        assert probes and not any(p["tests_passed"] for p in probes)
        assert by_id[good]["false_positive_risk"] == 0.0
    assert by_id["bad-noop-passes"]["false_positive_risk"] == 1.0
    assert sorted(t.id for t in load_tasks(config.admitted)) == [
        "good-config-lookup",
        "good-heartbeat-service",
        "good-text-report",
    ]
    assert "3 of 8 tasks admitted" in printed and "rejected by ablation: 1" in printed
