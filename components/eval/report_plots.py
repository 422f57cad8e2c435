"""The eval report's plots, each a base64 PNG drawn with matplotlib's Agg backend (no display needed).

    report_plots(runs)    [(caption, png), ...]: pass rate by family and by difficulty (whiskers
                          at the 95 % Wilson interval), failure modes, the turns, tokens and wall
                          time distributions, calls per turn, read-only vs state-changing calls

A run is ``(label, eval-results rows)``; several runs share each plot, one
series per run. ``components.eval.report`` lays the plots out in its HTML.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from components.eval.compare import Run
from components.eval.summary import difficulty_key, group_table, summarize
from components.eval.taxonomy import FAILURE_MODES
from termrl.figures import plt, png_base64

__all__ = ["report_plots"]

_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3")


def _grouped_bars(
    title: str,
    ylabel: str,
    categories: list[str],
    series: list[tuple[str, list[float]]],
    ylim: tuple[float, float] | None = None,
    errors: list[list[tuple[float, float]]] | None = None,
) -> str:
    """Bars per category and series; ``errors`` (per series, per category): (low, high) whiskers."""
    figure, ax = plt.subplots(
        figsize=(max(4.0, 0.9 * len(categories) * max(1, len(series)) + 1.5), 3.2)
    )
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(categories))]
        yerr = None
        if errors is not None:
            # Whisker lengths; never negative (matplotlib refuses), even where v sits on an end.
            yerr = [
                [max(0.0, v - low) for v, (low, _) in zip(values, errors[i], strict=True)],
                [max(0.0, high - v) for v, (_, high) in zip(values, errors[i], strict=True)],
            ]
        bars = ax.bar(
            xs,
            values,
            width,
            label=label,
            color=_COLORS[i % len(_COLORS)],
            yerr=yerr,
            capsize=3 if yerr else 0,
            error_kw={"elinewidth": 0.8},
        )
        ax.bar_label(bars, labels=[f"{v:.2g}" for v in values], fontsize=7)
    ax.set_xticks(
        range(len(categories)),
        categories,
        rotation=20 if len(categories) > 4 else 0,
        ha="right" if len(categories) > 4 else "center",
    )
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return png_base64(figure)


def _histogram(
    title: str, xlabel: str, series: list[tuple[str, list[float]]], ylabel: str = "trials"
) -> str:
    figure, ax = plt.subplots(figsize=(4.8, 3.2))
    values = [v for _, vs in series for v in vs]
    if values:
        low, high = min(values), max(values)
        if all(float(v).is_integer() for v in values) and high - low <= 20:
            bins: Any = [b - 0.5 for b in range(int(low), int(high) + 2)]  # one bar per integer
        else:
            bins = 20
        # Side-by-side bars per bin: overlaid runs would hide each other.
        kept = [(label, vs) for label, vs in series if vs]
        ax.hist(
            [vs for _, vs in kept],
            bins=bins,
            label=[label for label, _ in kept],
            color=[_COLORS[i % len(_COLORS)] for i in range(len(kept))],
        )
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1 and values:
        ax.legend(fontsize=8)
    return png_base64(figure)


def _rate_plot(runs: Sequence[Run], key: str, title: str) -> str:
    """Pass rate per group, whiskers at the 95 % Wilson interval (a missing group: 0, no whisker)."""
    tables = [{r[key]: r for r in group_table(rows, key)} for _, rows in runs]
    names = sorted(
        {n for t in tables for n in t}, key=difficulty_key if key == "difficulty" else str
    )
    series = [
        (label, [t[n]["pass_rate"] if n in t else 0.0 for n in names])
        for (label, _), t in zip(runs, tables, strict=True)
    ]
    errors = [
        [
            (t[n]["pass_rate_ci_low"], t[n]["pass_rate_ci_high"]) if n in t else (0.0, 0.0)
            for n in names
        ]
        for t in tables
    ]
    return _grouped_bars(title, "pass rate (95 % CI)", names, series, ylim=(0, 1.1), errors=errors)


def report_plots(runs: Sequence[Run]) -> list[tuple[str, str]]:
    """(caption, base64 PNG) of every plot."""

    def column(pick: Callable[[Mapping[str, Any]], Any]) -> list[tuple[str, list[float]]]:
        return [
            (label, [float(v) for v in map(pick, rows) if v is not None]) for label, rows in runs
        ]

    modes = [
        (label, [float(summarize(rows)["failure_modes"][m]) for m in FAILURE_MODES])
        for label, rows in runs
    ]
    reached = [
        (label, [r for r in rows if r.get("failure_mode") != "environment-error"])
        for label, rows in runs
    ]
    tokens = [
        (
            label,
            [
                float((r.get("prompt_tokens") or 0) + (r.get("completion_tokens") or 0))
                for r in rows
            ],
        )
        for label, rows in reached
    ]
    calls = [
        (label, [float(n) for r in rows for n in (r.get("calls_per_turn") or [])])
        for label, rows in runs
    ]
    kinds = []
    for label, rows in runs:
        s = summarize(rows)
        kinds.append((label, [float(s["read_only_calls"]), float(s["state_changing_calls"])]))
    return [
        ("Pass rate by family", _rate_plot(runs, "family", "Pass rate by family")),
        ("Pass rate by difficulty", _rate_plot(runs, "difficulty", "Pass rate by difficulty")),
        (
            "Failure modes",
            _grouped_bars("Failure modes (failed trials)", "trials", list(FAILURE_MODES), modes),
        ),
        (
            "Turns per trial",
            _histogram("Turns per trial", "turns", column(lambda r: r.get("turns"))),
        ),
        (
            "Tokens per trial",
            _histogram("Tokens per trial (prompt + completion)", "tokens", tokens),
        ),
        (
            "Wall time per trial",
            _histogram("Wall time per trial", "seconds", column(lambda r: r.get("wall_sec"))),
        ),
        ("Calls per turn", _histogram("Tool calls per agent turn", "calls", calls, ylabel="turns")),
        (
            "Read-only vs state-changing calls",
            _grouped_bars("Tool calls by kind", "calls", ["read-only", "state-changing"], kinds),
        ),
    ]
