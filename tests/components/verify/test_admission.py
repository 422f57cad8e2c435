"""Admission: the first failed required check is the reason; rows fit the verdicts artifact."""

from __future__ import annotations

import json

from components.verify.admission import Verdict, decide, false_positive_risk, summary
from components.verify.config import CHECKS
from components.verify.outcomes import CheckOutcome
from termrl.artifacts import read_verdicts, write_verdicts

REQUIRED = ("flakiness", "ground_truth", "noop", "ablation", "state_replay")


def outcomes(**overrides: CheckOutcome) -> dict[str, CheckOutcome]:
    base = {name: CheckOutcome(name, "pass", f"{name} fine") for name in CHECKS}
    base["ground_truth"].runs = [True, True, True]
    base["noop"].runs = [False, False, False]
    base.update(overrides)
    return base


def test_all_required_passing_admits_and_skipped_counts_as_passing():
    assert decide(outcomes(flakiness=CheckOutcome("flakiness", "skipped", "K=1")), REQUIRED) == (
        True,
        "admitted",
    )


def test_reason_is_the_first_failed_required_check_in_check_order():
    # a flaky task also fails its ground truth now and then: flakiness is named first
    found = outcomes(
        ground_truth=CheckOutcome("ground_truth", "fail", "2/3"),
        flakiness=CheckOutcome("flakiness", "fail", "mixed"),
    )
    assert decide(found, REQUIRED) == (False, "flakiness")
    assert decide(outcomes(state_replay=CheckOutcome("state_replay", "error", "x")), REQUIRED) == (
        False,
        "state_replay",
    )
    assert decide(outcomes(ablation=CheckOutcome.blocked("ablation", "noop failed")), REQUIRED) == (
        False,
        "ablation",
    )


def test_checks_that_are_not_required_are_recorded_but_do_not_reject():
    found = outcomes(
        judges=CheckOutcome("judges", "fail", "flagged"),
        state_replay=CheckOutcome("state_replay", "fail", "process"),
    )
    assert decide(found, ("ground_truth", "noop")) == (True, "admitted")
    assert decide(found, (*REQUIRED, "judges")) == (False, "state_replay")


def test_false_positive_risk_is_the_strongest_sign():
    assert false_positive_risk(outcomes()) == 0.0
    noop = CheckOutcome("noop", "fail", "", runs=[True, False, None, False])
    assert false_positive_risk(outcomes(noop=noop)) == 1 / 3  # 1 of 3 measured runs
    probes = [
        {"step_index": i, "step": f"s{i}", "tests_passed": p}
        for i, p in enumerate([True, False, False, None])
    ]
    ablation = CheckOutcome("ablation", "fail", "", detail={"probes": probes})
    assert false_positive_risk(outcomes(ablation=ablation)) == 1 / 3
    judges = [{"verdict": v} for v in ("flag", "ok", "error", "ok")]
    assert (
        false_positive_risk(
            outcomes(judges=CheckOutcome("judges", "pass", "", detail={"judges": judges}))
        )
        == 1 / 3
    )
    assert (
        false_positive_risk(
            outcomes(ablation=ablation, state_replay=CheckOutcome("state_replay", "fail", ""))
        )
        == 1.0
    )


def test_verdict_rows_round_trip_through_the_artifact(tmp_path):
    probes = [
        {"step_index": 1, "step": "chmod +x /app/x", "tests_passed": True},
        {"step_index": 2, "step": "sort a > b", "tests_passed": False},
    ]
    bad = Verdict.of(
        "bad",
        outcomes(
            ablation=CheckOutcome("ablation", "fail", "step 1 unchecked", detail={"probes": probes})
        ),
        REQUIRED,
        3.5,
    )
    judge = {
        "model": "local",
        "verdict": "error",
        "flags": [],
        "rationale": "",
        "error": "malformed verdict",
    }
    good = Verdict.of(
        "good",
        outcomes(
            judges=CheckOutcome("judges", "error", "no judge answered", detail={"judges": [judge]})
        ),
        REQUIRED,
        1.0,
    )
    write_verdicts(tmp_path / "v.parquet", [bad.to_row(), good.to_row()])
    rows = {r["task_id"]: r for r in read_verdicts(tmp_path / "v.parquet").to_pylist()}
    assert rows["bad"]["admitted"] is False and rows["bad"]["reason"] == "ablation"
    assert rows["bad"]["unchecked_steps"] == ["chmod +x /app/x"]
    assert rows["bad"]["false_positive_risk"] == 0.5
    assert (
        rows["good"]["admitted"] is True
        and rows["good"]["judges"][0]["error"] == "malformed verdict"
    )
    checks = json.loads(rows["bad"]["checks"])
    assert checks["ablation"] == {
        "outcome": "fail",
        "seconds": 0.0,
        "reason": "step 1 unchecked",
        "probes": probes,
    }
    assert checks["ground_truth"]["runs"] == [True, True, True]
    text = summary([bad, good])
    assert text.splitlines()[0] == "verify: 1 of 2 tasks admitted, 1 rejected"
    assert "rejected by ablation: 1" in text and "bad: step 1 unchecked" in text
