"""Several policies on the same tasks: pass rates with intervals, paired differences vs the first.

    policy_table(runs, heldout_families)    one PolicyRow per run, in order; the first is the base
    family_table(runs, heldout_families)    one FamilyRow per task family: each run's rate, Δ vs base
    comparison_metrics(table)               flat ``compare/<label>/<stat>`` floats (KFP Metrics)
    table_from_metrics(values)              the table back from those floats (the local runner's summary)
    comparison_lines(table)                 the table as printable lines

A run is ``(label, eval-results rows)``; the curriculum passes base, after
phase 1, final (and any other policy worth a column) in that order. Pass
rates are over trials with a Wilson interval; each later run's difference vs
the first is paired by task (``components.eval.stats.paired_difference``).
Held-out families are families no training pool contained ("not trained
on"): each run's pass rate on them is reported apart, since a gain there is
generalisation, not memory.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from components.eval.stats import PairedDifference, Rate, paired_difference, pass_rate
from components.eval.summary import task_counts

__all__ = [
    "FamilyRow",
    "PolicyRow",
    "comparison_lines",
    "comparison_metrics",
    "family_list",
    "family_table",
    "format_diff",
    "format_rate",
    "policy_table",
    "table_from_metrics",
]

Rows = Sequence[Mapping[str, Any]]
Run = tuple[str, Rows]
_PREFIX = "compare/"


@dataclass(frozen=True)
class PolicyRow:
    """One policy of a comparison."""

    label: str
    tasks: int
    rate: Rate
    """Pass rate over all trials, with its Wilson interval."""
    vs_base: PairedDifference | None = None
    """This policy − the first one, paired by task; None for the first itself."""
    heldout: Rate | None = None
    """Pass rate on the held-out-only families; None when none were named."""
    by_difficulty: tuple[tuple[str, Rate], ...] = ()
    """Pass rate on the trained families' tasks of each difficulty (easy, medium, hard order)."""


@dataclass(frozen=True)
class FamilyRow:
    """One task family across the runs (entries in run order; None where a run has no such task)."""

    family: str
    heldout: bool
    """Named as held-out-only: no policy was trained on this family."""
    rates: list[Rate | None]
    vs_base: list[PairedDifference | None]


def family_list(text: str) -> list[str]:
    """``"git, files"`` -> ``["git", "files"]`` (a KFP parameter is a plain string)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _rate(rows: Rows) -> Rate:
    return pass_rate(sum(bool(r["passed"]) for r in rows), len(rows))


def _task_rates(rows: Rows) -> dict[str, float]:
    return {task: passed / n for task, (n, passed) in task_counts(rows).items()}


def _family(row: Mapping[str, Any]) -> str:
    return str(row.get("family") or "unknown")


DIFFICULTY_ORDER = ("easy", "medium", "hard")


def _by_difficulty(rows: Rows, held: Collection[str]) -> tuple[tuple[str, Rate], ...]:
    """The trained families' rows, one rate per difficulty: how far beyond easy tasks a policy reaches."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if _family(row) not in held:
            groups.setdefault(str(row.get("difficulty") or "unknown"), []).append(row)
    order = {d: i for i, d in enumerate(DIFFICULTY_ORDER)}
    return tuple((d, _rate(groups[d])) for d in sorted(groups, key=lambda d: (order.get(d, 99), d)))


def policy_table(runs: Sequence[Run], heldout_families: Collection[str] = ()) -> list[PolicyRow]:
    """Each run's pass rate, its difference vs the first run, and its rate on held-out families."""
    if not runs:
        raise ValueError("a comparison needs at least one run")
    base = _task_rates(runs[0][1])
    held = set(heldout_families)
    table = []
    for index, (label, rows) in enumerate(runs):
        table.append(
            PolicyRow(
                label=label,
                tasks=len(task_counts(rows)),
                rate=_rate(rows),
                vs_base=paired_difference(base, _task_rates(rows)) if index else None,
                heldout=_rate([r for r in rows if _family(r) in held]) if held else None,
                by_difficulty=_by_difficulty(rows, held),
            )
        )
    return table


def family_table(runs: Sequence[Run], heldout_families: Collection[str] = ()) -> list[FamilyRow]:
    """Per family: each run's pass rate and its paired difference vs the first run."""
    families = sorted({_family(r) for _, rows in runs for r in rows} | set(heldout_families))
    out = []
    for family in families:
        members = [[r for r in rows if _family(r) == family] for _, rows in runs]
        base = _task_rates(members[0])
        out.append(
            FamilyRow(
                family=family,
                heldout=family in heldout_families,
                rates=[_rate(m) if m else None for m in members],
                vs_base=[
                    paired_difference(base, _task_rates(m)) if i and m else None
                    for i, m in enumerate(members)
                ],
            )
        )
    return out


def comparison_metrics(table: Sequence[PolicyRow]) -> dict[str, float]:
    """``compare/<label>/<stat>`` floats, in table order (labels may hold '/', stats never do)."""
    out: dict[str, float] = {}
    for row in table:
        key = f"{_PREFIX}{row.label}/"
        out.update(
            {
                key + "tasks": float(row.tasks),
                key + "trials": float(row.rate.n),
                key + "passed": float(row.rate.passed),
                key + "pass_rate": row.rate.rate,
                key + "pass_rate_ci_low": row.rate.low,
                key + "pass_rate_ci_high": row.rate.high,
            }
        )
        if row.vs_base is not None:
            d = row.vs_base
            out.update(
                {
                    key + "diff_vs_base": d.diff,
                    key + "diff_ci_low": d.low,
                    key + "diff_ci_high": d.high,
                    key + "paired_tasks": float(d.tasks),
                    key + "tasks_gained": float(d.gained),
                    key + "tasks_lost": float(d.lost),
                    key + "diff_newcombe": float(d.method == "newcombe"),
                }
            )
        for difficulty, rate in row.by_difficulty:
            out.update(
                {
                    f"{key}trained_{difficulty}_trials": float(rate.n),
                    f"{key}trained_{difficulty}_passed": float(rate.passed),
                    f"{key}trained_{difficulty}_pass_rate": rate.rate,
                    f"{key}trained_{difficulty}_ci_low": rate.low,
                    f"{key}trained_{difficulty}_ci_high": rate.high,
                }
            )
        if row.heldout is not None:
            h = row.heldout
            out.update(
                {
                    key + "heldout_trials": float(h.n),
                    key + "heldout_passed": float(h.passed),
                    key + "heldout_pass_rate": h.rate,
                    key + "heldout_ci_low": h.low,
                    key + "heldout_ci_high": h.high,
                }
            )
    return out


def table_from_metrics(values: Mapping[str, Any]) -> list[PolicyRow]:
    """The inverse of ``comparison_metrics`` (other keys are ignored); rows in the order written."""
    stats: dict[str, dict[str, float]] = {}
    for key, value in values.items():
        if key.startswith(_PREFIX) and "/" in key[len(_PREFIX) :]:
            label, stat = key[len(_PREFIX) :].rsplit("/", 1)
            stats.setdefault(label, {})[stat] = float(value)
    table = []
    for label, s in stats.items():
        row = PolicyRow(
            label,
            int(s["tasks"]),
            Rate(
                int(s["passed"]),
                int(s["trials"]),
                s["pass_rate"],
                s["pass_rate_ci_low"],
                s["pass_rate_ci_high"],
            ),
        )
        if "diff_vs_base" in s:
            row = replace(
                row,
                vs_base=PairedDifference(
                    s["diff_vs_base"],
                    s["diff_ci_low"],
                    s["diff_ci_high"],
                    int(s["paired_tasks"]),
                    int(s["tasks_gained"]),
                    int(s["tasks_lost"]),
                    "newcombe" if s["diff_newcombe"] else "normal",
                ),
            )
        if "heldout_trials" in s:
            row = replace(
                row,
                heldout=Rate(
                    int(s["heldout_passed"]),
                    int(s["heldout_trials"]),
                    s["heldout_pass_rate"],
                    s["heldout_ci_low"],
                    s["heldout_ci_high"],
                ),
            )
        difficulties = [k[len("trained_") : -len("_trials")] for k in s if _TRAINED.fullmatch(k)]
        row = replace(
            row,
            by_difficulty=tuple(
                (
                    d,
                    Rate(
                        int(s[f"trained_{d}_passed"]),
                        int(s[f"trained_{d}_trials"]),
                        s[f"trained_{d}_pass_rate"],
                        s[f"trained_{d}_ci_low"],
                        s[f"trained_{d}_ci_high"],
                    ),
                )
                for d in difficulties
            ),
        )
        table.append(row)
    return table


_TRAINED = re.compile(r"trained_[^_]+_trials")


def format_rate(rate: Rate | None) -> str:
    """``25.0 % [4.6, 69.9]`` (percent, interval in percent points)."""
    if rate is None:
        return "–"
    return f"{100 * rate.rate:.1f} % [{100 * rate.low:.1f}, {100 * rate.high:.1f}]"


def format_diff(diff: PairedDifference | None) -> str:
    """``+25.0 pp [-29.1, +70.6]`` (percent points)."""
    if diff is None:
        return "–"
    return f"{100 * diff.diff:+.1f} pp [{100 * diff.low:+.1f}, {100 * diff.high:+.1f}]"


def comparison_lines(table: Sequence[PolicyRow]) -> list[str]:
    """The comparison as a fixed-width table (the first row is the base; n counts trials), then
    each policy's rate on every slice, with its 95 % interval and n: the trained families' tasks
    of each difficulty ("same family, easy", ...) and the families left out of training."""
    if not table:
        return []
    width = max(8, *(len(r.label) + 2 for r in table))
    heldout = any(r.heldout is not None for r in table)
    header = (
        f"  {'policy':<{width}}{'pass rate [95 % CI]':<24}{'n':>5}  {'Δ vs ' + table[0].label + ' [95 % CI]':<27}"
        f"{'pairs':>6}{'gained':>7}{'lost':>5}"
    )
    if heldout:
        header += f"  {'left-out families [95 % CI]':<28}{'n':>5}"
    lines = [header]
    for row in table:
        d = row.vs_base
        line = (
            f"  {row.label:<{width}}{format_rate(row.rate):<24}{row.rate.n:>5}  {format_diff(d):<27}"
            f"{d.tasks if d else '–':>6}{d.gained if d else '–':>7}{d.lost if d else '–':>5}"
        )
        if heldout:
            line += f"  {format_rate(row.heldout):<28}{row.heldout.n if row.heldout else 0:>5}"
        lines.append(line.rstrip())
    lines += _slice_lines(table, width)
    return lines


def _slices(row: PolicyRow) -> dict[str, Rate]:
    """A policy's slices: the trained families' tasks by difficulty, then the left-out families'."""
    slices = {f"same family, {d}": rate for d, rate in row.by_difficulty}
    if row.heldout is not None:
        slices["left-out families"] = row.heldout
    return slices


def _slice_lines(table: Sequence[PolicyRow], width: int) -> list[str]:
    """Each policy's rate on every slice with its 95 % interval and n (nothing when there is only
    one slice: the overall rate says it all)."""
    names = list(dict.fromkeys(name for row in table for name in _slices(row)))
    if len(names) < 2:
        return []
    width = max(width, len("slice") + 2)
    lines = ["", f"  {'slice':<{width}}" + "".join(f"{n:<29}" for n in names).rstrip()]
    for row in table:
        rates = _slices(row)
        cells = [f"{format_rate(rates[n])} {rates[n].n:>3}" if n in rates else "–" for n in names]
        lines.append(f"  {row.label:<{width}}" + "".join(f"{c:<29}" for c in cells).rstrip())
    return lines
