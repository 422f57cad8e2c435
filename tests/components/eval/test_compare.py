"""Comparing several policies: the table, per family, held-out families, metrics, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.eval.compare import (
    comparison_lines,
    comparison_metrics,
    family_list,
    family_table,
    policy_table,
    table_from_metrics,
)
from components.eval.report import compare_files, render_report
from components.eval.stats import paired_difference, pass_rate

from .rows import make_row, written
from .test_report import parse

FAMILY = {"t1": "files", "t2": "files", "t3": "git", "t4": "git"}


def outcomes(run_id: str, passed: set[str]) -> list[dict]:
    """One trial per task t1..t4 (files: t1 t2, git: t3 t4); ``passed`` passes."""
    return [make_row(t, 0, t in passed, run_id=run_id, family=f) for t, f in FAMILY.items()]


BASE = outcomes("base", {"t1"})
PHASE1 = outcomes("phase 1", {"t1", "t2"})
FINAL = outcomes("final", {"t2", "t3"})  # gains t2 and t3, loses t1
RUNS = [("base", BASE), ("phase 1", PHASE1), ("final", FINAL)]


def test_policy_table_pairs_each_policy_with_the_base() -> None:
    base, phase1, final = policy_table(RUNS, heldout_families=["git"])
    assert (base.label, base.tasks, base.rate) == ("base", 4, pass_rate(1, 4))
    assert base.vs_base is None
    assert phase1.rate == pass_rate(2, 4) and final.rate == pass_rate(2, 4)
    # final vs base: a (both) 0, lost t1, gained t2 t3, neither t4 -> +1/4
    d = final.vs_base
    assert d is not None and (d.tasks, d.gained, d.lost, d.method) == (4, 2, 1, "newcombe")
    assert d.diff == pytest.approx(0.25)
    assert d == paired_difference(
        {t: float(t == "t1") for t in FAMILY}, {t: float(t in ("t2", "t3")) for t in FAMILY}
    )
    # held-out family git: base 0 of 2, phase 1 0 of 2, final 1 of 2 (t3)
    assert [row.heldout for row in (base, phase1, final)] == [
        pass_rate(0, 2),
        pass_rate(0, 2),
        pass_rate(1, 2),
    ]
    assert all(row.heldout is None for row in policy_table(RUNS))  # none named, none shown


def test_family_table_marks_held_out_families() -> None:
    files, git = family_table(RUNS, heldout_families=["git"])
    assert (files.family, files.heldout, git.family, git.heldout) == ("files", False, "git", True)
    assert files.rates == [pass_rate(1, 2), pass_rate(2, 2), pass_rate(1, 2)]
    assert (
        files.vs_base[0] is None and files.vs_base[1] is not None and files.vs_base[1].diff == 0.5
    )
    assert git.vs_base[2] is not None and (git.vs_base[2].gained, git.vs_base[2].lost) == (1, 0)
    # a named family no run has still gets a row (it says "no tasks", not nothing)
    assert family_table(RUNS, ["docker"])[0].rates == [None, None, None]


def test_metrics_round_trip_in_order() -> None:
    table = policy_table([("base", BASE), ("litellm:openai/x", FINAL)], heldout_families=["git"])
    values = comparison_metrics(table)
    assert (
        values["compare/base/pass_rate"] == 0.25
        and values["compare/litellm:openai/x/tasks_lost"] == 1.0
    )
    assert all(isinstance(v, float) for v in values.values())
    assert table_from_metrics(json.loads(json.dumps({"eval/other": 1.0, **values}))) == table
    assert family_list(" git, ,files ") == ["git", "files"] and family_list("") == []


def test_comparison_lines() -> None:
    lines = comparison_lines(policy_table(RUNS, heldout_families=["git"]))
    assert (
        lines[0].split()[:2] == ["policy", "pass"]
        and "Δ vs base" in lines[0]
        and "left-out" in lines[0]
    )
    assert lines[1].startswith("  base ") and "25.0 % [" in lines[1]
    final = lines[3]
    # pass rate 50 %, n 4, Δ +25 pp, 4 paired tasks, 2 gained, 1 lost, held-out 50 % of 2
    assert final.startswith("  final ") and "50.0 % [" in final and "+25.0 pp [" in final
    parts = [part.split() for part in final.split("]")]
    assert (
        parts[1][0] == "4"
        and parts[2] == ["4", "2", "1", "50.0", "%", "[9.5,", "90.5"]
        and parts[3] == ["2"]
    )
    assert comparison_lines([]) == []


def test_compare_files_writes_the_report_and_metrics(tmp_path: Path) -> None:
    paths = [
        (slot, written(tmp_path, rows, f"{slot}.parquet"))
        for slot, rows in (("base", BASE), ("phase1", PHASE1), ("final", FINAL))
    ]
    out = tmp_path / "report.html"
    values = compare_files(out, paths, heldout_families=["git"])
    # the legacy headline numbers, by slot, and the table, by run_id
    assert values["eval/base_pass_rate"] == 0.25 and values["eval/phase1_pass_rate"] == 0.5
    assert values["eval/pass_rate_delta"] == 0.25
    assert [row.label for row in table_from_metrics(values)] == ["base", "phase 1", "final"]
    page = parse(out.read_text())
    assert (
        "Comparison" in page.headings
        and "termrl curriculum: base vs phase 1 vs final policy" in out.read_text()
    )
    cells = page.cells
    final = cells.index("final", cells.index("Δ interval"))
    # policy, tasks, trials, passed, pass rate, CI, Δ, Δ CI, paired tasks, gained, lost, method, held-out ...
    assert cells[final : final + 5] == ["final", "4", "4", "2", "0.500"]
    assert cells[final + 6] == "0.250" and cells[final + 8 : final + 12] == [
        "4",
        "2",
        "1",
        "newcombe",
    ]
    assert cells[final + 12] == "0.500"  # held-out family git: 1 of 2
    assert "Δ (phase 1 − base)" in cells and "Δ (final − base)" in cells  # the per-task table
    # a run whose file names no single run_id takes its slot's name
    unnamed = written(tmp_path, [{**r, "run_id": None} for r in FINAL], "unnamed.parquet")
    values = compare_files(out, [("base", paths[0][1]), ("final", unnamed)])
    assert [row.label for row in table_from_metrics(values)] == ["base", "final"]


def test_single_run_report_shows_intervals() -> None:
    page = parse(render_report([("run-a", BASE)]))
    cells = page.cells
    assert "Comparison" not in page.headings
    # 1 of 4: Wilson 95 % [0.046, 0.699]
    assert cells[cells.index("accuracy_ci_low") + 1] == "0.046"
    assert cells[cells.index("accuracy_ci_high") + 1] == "0.699"
    assert "pass_rate_ci_low" in cells  # the family, difficulty and task tables


def test_the_trained_families_are_sliced_by_difficulty_and_shown_per_slice() -> None:
    def run(run_id: str, passed: set[str]) -> list[dict]:
        tasks = {"e1": ("files", "easy"), "e2": ("files", "easy"), "m1": ("files", "medium")}
        tasks |= {"m2": ("text", "medium"), "x1": ("git", "easy"), "x2": ("git", "medium")}
        return [
            make_row(t, 0, t in passed, run_id=run_id, family=f, difficulty=d)
            for t, (f, d) in tasks.items()
        ]

    runs = [("base", run("base", set())), ("final", run("final", {"e1", "e2", "m1", "x2"}))]
    base, final = policy_table(runs, heldout_families=["git"])
    # git is held out: its tasks count in no difficulty slice, only in the held-out rate
    assert base.by_difficulty == (("easy", pass_rate(0, 2)), ("medium", pass_rate(0, 2)))
    assert final.by_difficulty == (("easy", pass_rate(2, 2)), ("medium", pass_rate(1, 2)))
    assert final.heldout == pass_rate(1, 2)
    assert table_from_metrics(comparison_metrics([base, final])) == [base, final]
    lines = comparison_lines([base, final])
    at = lines.index("") + 1
    assert lines[at].split() == (
        ["slice", "same", "family,", "easy", "same", "family,", "medium", "left-out", "families"]
    )
    # final: easy 100 % of 2, medium 50 % of 2, left out 50 % of 2, each with its interval
    assert lines[at + 2].split()[:4] == ["final", "100.0", "%", "[34.2,"]
    assert lines[at + 2].count("50.0 % [9.5, 90.5]   2") == 2
    # one difficulty and no held-out family: nothing more to show than the overall rate
    assert "" not in comparison_lines(policy_table(RUNS))
