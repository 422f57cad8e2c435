"""The eval report: one self-contained HTML file, plots embedded as base64 PNG.

    write_report(out_path, [(label, rows), ...])       one run, or several side by side
    report_from_files(out_path, [a.parquet, ...])      the same from eval-results files
    compare_files(out_path, [(slot, path), ...])       a comparison of policies -> its KFP metrics

Contents, top to bottom: a summary table (accuracy, pass@k, failure modes,
tokens, turns, wall time, tool-call statistics; one column per run), plots
(pass rate by family and by difficulty, failure modes, turns, tokens and wall
time distributions, calls per turn and read-only vs state-changing calls),
the family and difficulty tables, and the per-task table. Every pass rate
comes with its 95 % Wilson interval (``components.eval.stats``).

With several runs the first is the base: a comparison section shows each
run's pass rate and its paired difference vs the base (interval, tasks gained
and lost; ``components.eval.compare``), also per family, with the families
named as held-out-only ("not trained on") marked and summarised apart; the
per-task table shows every run's pass rate and the differences (B − A with
two runs), so a regression stands out.

Plots are drawn with matplotlib's Agg backend (no display needed); the file
references nothing outside itself, so it opens anywhere — a KFP HTML
artifact, a mail attachment, an air-gapped laptop.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.eval.compare import (
    comparison_metrics,
    family_table,
    format_diff,
    format_rate,
    policy_table,
)
from components.eval.summary import difficulty_key, group_table, summarize, task_table
from components.eval.taxonomy import FAILURE_MODES
from termrl.artifacts.eval_results import read_eval_results
from termrl.figures import plt, png_base64

__all__ = ["compare_files", "render_report", "report_from_files", "write_report"]

Rows = Sequence[Mapping[str, Any]]
Run = tuple[str, Rows]
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


def _plots(runs: Sequence[Run]) -> list[tuple[str, str]]:
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


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def _table(header: Sequence[str], body: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in body
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _summary_table(runs: Sequence[Run]) -> str:
    summaries = [summarize(rows) for _, rows in runs]
    names: list[str] = []
    for s in summaries:
        names += [n for n in s if n not in names and n not in ("failure_modes", "run_id")]
    body = [[n] + [s.get(n) for s in summaries] for n in names]
    body += [[f"failure: {m}"] + [s["failure_modes"][m] for s in summaries] for m in FAILURE_MODES]
    return _table(["metric"] + [label for label, _ in runs], body, "summary")


def _group_tables(runs: Sequence[Run], key: str) -> str:
    parts = []
    for label, rows in runs:
        table = group_table(rows, key)
        header = list(table[0]) if table else [key]
        parts.append(
            f"<h3>{html.escape(label)}</h3>" + _table(header, [list(r.values()) for r in table])
        )
    return "".join(parts)


def _ci(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def _task_tables(runs: Sequence[Run]) -> str:
    if len(runs) >= 2:
        # One table: every run's pass rate, then each later run's Δ against the first.
        tables = [{r["task_id"]: r for r in task_table(rows)} for _, rows in runs]
        labels = [label for label, _ in runs]
        body = []
        for task_id in sorted(set().union(*tables)):
            found = [t.get(task_id) for t in tables]
            meta = next(r for r in found if r)
            rates = [r["pass_rate"] if r else None for r in found]
            deltas = [
                rate - rates[0] if rate is not None and rates[0] is not None else None
                for rate in rates[1:]
            ]
            body.append(
                [
                    task_id,
                    meta.get("family"),
                    meta.get("difficulty"),
                    *rates,
                    *deltas,
                    *(
                        _ci(r["pass_rate_ci_low"], r["pass_rate_ci_high"]) if r else "–"
                        for r in found
                    ),
                    *(r and r["failure_modes"] for r in found),
                ]
            )
        if len(runs) == 2:
            delta_names = ["Δ (B − A)"]
        else:
            delta_names = [f"Δ ({label} − {labels[0]})" for label in labels[1:]]
        header = [
            "task",
            "family",
            "difficulty",
            *(f"pass rate {label}" for label in labels),
            *delta_names,
            *(f"95 % CI {label}" for label in labels),
            *(f"failures {label}" for label in labels),
        ]
        return _table(header, body, "tasks")
    parts = []
    for label, rows in runs:
        table = task_table(rows)
        parts.append(
            f"<h3>{html.escape(label)}</h3>"
            + _table(list(table[0]), [list(r.values()) for r in table], "tasks")
        )
    return "".join(parts)


def _comparison(runs: Sequence[Run], heldout_families: Collection[str]) -> str:
    """Each policy's pass rate and its paired difference vs the first run, overall and per family."""
    table = policy_table(runs, heldout_families)
    base = runs[0][0]
    header = [
        "policy",
        "tasks",
        "trials",
        "passed",
        "pass rate",
        "95 % CI",
        f"Δ vs {base}",
        "Δ 95 % CI",
        "paired tasks",
        "tasks gained",
        "tasks lost",
        "Δ interval",
    ]
    if heldout_families:
        header += ["held-out families: pass rate", "95 % CI", "trials"]
    difficulties = list(dict.fromkeys(d for row in table for d, _ in row.by_difficulty))
    for difficulty in difficulties:
        header += [f"trained, {difficulty}: pass rate", "95 % CI", "trials"]
    body = []
    for row in table:
        d = row.vs_base
        line = [
            row.label,
            row.tasks,
            row.rate.n,
            row.rate.passed,
            row.rate.rate,
            _ci(row.rate.low, row.rate.high),
            d and d.diff,
            _ci(d.low, d.high) if d else "–",
            d and d.tasks,
            d and d.gained,
            d and d.lost,
            d and d.method,
        ]
        if row.heldout is not None:
            line += [row.heldout.rate, _ci(row.heldout.low, row.heldout.high), row.heldout.n]
        rates = dict(row.by_difficulty)
        for difficulty in difficulties:
            rate = rates.get(difficulty)
            line += [rate.rate, _ci(rate.low, rate.high), rate.n] if rate else ["–", "–", 0]
        body.append(line)
    families = family_table(runs, heldout_families)
    labels = [label for label, _ in runs]
    family_body = [
        [
            f.family,
            f.heldout,
            *(format_rate(r) + (f" of {r.n}" if r else "") for r in f.rates),
            *(format_diff(d) for d in f.vs_base[1:]),
        ]
        for f in families
    ]
    family_header = [
        "family",
        "not trained on",
        *(f"{label}: pass rate [95 % CI]" for label in labels),
        *(f"Δ {label} − {base} [95 % CI]" for label in labels[1:]),
    ]
    note = (
        "<p>Pass rates are over trials with a 95 % Wilson score interval. Δ is the mean over the tasks both "
        "runs evaluated of the per-task difference in pass rate, with a 95 % paired interval: Newcombe's "
        "hybrid score interval when every task passed or failed outright in both runs, else the normal "
        "approximation over the per-task differences. Gained: tasks the policy passes more often than "
        f"{html.escape(base)}; lost: less often."
        + (
            " Held-out families (not trained on): "
            + html.escape(", ".join(sorted(heldout_families)))
            + "."
            if heldout_families
            else ""
        )
        + "</p>"
    )
    return (
        _table(header, body, "comparison")
        + note
        + "<h3>By family (pp: percent points)</h3>"
        + _table(family_header, family_body, "families")
    )


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.plots{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;border:1px solid #eee;padding:6px}
figcaption{font-size:12px;color:#555}
"""


def render_report(
    runs: Sequence[Run],
    *,
    title: str | None = None,
    heldout_families: Collection[str] = (),
    sections: Sequence[tuple[str, str]] = (),
) -> str:
    """The report's HTML for one or more runs (label, rows); with several, the first is the base.
    ``sections`` (heading, HTML) follow the comparison: what other stages add, e.g. training health."""
    if not runs:
        raise ValueError("a report needs at least one run")
    labels = [label for label, _ in runs]
    title = title or ("termrl eval: " + " vs ".join(labels))
    figures = "".join(
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{png}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for caption, png in _plots(runs)
    )
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Generated {stamp}. Runs: "
        + ", ".join(f"<b>{html.escape(label)}</b> ({len(rows)} trials)" for label, rows in runs)
        + "</p>"
        f"<h2>Summary</h2>{_summary_table(runs)}"
        + (f"<h2>Comparison</h2>{_comparison(runs, heldout_families)}" if len(runs) > 1 else "")
        + "".join(f"<h2>{html.escape(heading)}</h2>{body}" for heading, body in sections)
        + f'<h2>Plots</h2><div class="plots">{figures}</div>'
        f"<h2>By family</h2>{_group_tables(runs, 'family')}"
        f"<h2>By difficulty</h2>{_group_tables(runs, 'difficulty')}"
        f"<h2>Per task</h2>{_task_tables(runs)}"
        "</body></html>"
    )


def write_report(
    out_path: str | os.PathLike,
    runs: Sequence[Run],
    *,
    title: str | None = None,
    heldout_families: Collection[str] = (),
    sections: Sequence[tuple[str, str]] = (),
) -> Path:
    """Render and write the report atomically; returns its path."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    html_text = render_report(
        runs, title=title, heldout_families=heldout_families, sections=sections
    )
    tmp.write_text(html_text, encoding="utf-8")
    tmp.replace(out)
    return out


def _run_label(fallback: str, rows: Rows, taken: set[str]) -> str:
    ids = {r.get("run_id") for r in rows if r.get("run_id")}
    label = ids.pop() if len(ids) == 1 else fallback
    # Two files of the same run (a rerun) still need distinct columns.
    return label if label not in taken else f"{label} ({fallback})"


def _read_runs(results: Sequence[tuple[str, str | os.PathLike]]) -> list[Run]:
    """(fallback name, path) -> (label, rows): labelled by the file's run_id, else the fallback."""
    runs: list[Run] = []
    for fallback, path in results:
        rows = read_eval_results(path).to_pylist()
        runs.append((_run_label(fallback, rows, {label for label, _ in runs}), rows))
    return runs


def report_from_files(
    out_path: str | os.PathLike,
    results: Sequence[str | os.PathLike],
    *,
    heldout_families: Collection[str] = (),
) -> Path:
    """The report of one eval-results file, or a comparison of several (the first is the base)."""
    runs = _read_runs([(Path(path).stem, path) for path in results])
    return write_report(out_path, runs, heldout_families=heldout_families)


def compare_files(
    out_path: str | os.PathLike,
    results: Sequence[tuple[str, str | os.PathLike]],
    *,
    heldout_families: Collection[str] = (),
    title: str | None = None,
    sections: Sequence[tuple[str, str]] = (),
) -> dict[str, float]:
    """The comparison report of labelled policies' results, in order (the first is the base).

    ``results`` is ``[(slot, path), ...]``, e.g. base, phase1, final. A run is named
    by the ``run_id`` in its file (the slot when the file holds none or several).
    Returns the KFP metrics: ``comparison_metrics`` of the table, plus
    ``eval/<slot>_pass_rate`` per slot and ``eval/pass_rate_delta`` (final − base)
    when both slots are given.
    """
    if not results:
        raise ValueError("a comparison needs at least one eval-results file")
    runs = _read_runs(results)
    labels = [label for label, _ in runs]
    write_report(
        out_path,
        runs,
        heldout_families=heldout_families,
        sections=sections,
        title=title or "termrl curriculum: " + " vs ".join(labels) + " policy (held-out tasks)",
    )
    table = policy_table(runs, heldout_families)
    rates = {slot: row.rate.rate for (slot, _), row in zip(results, table, strict=True)}
    values = {f"eval/{slot}_pass_rate": rate for slot, rate in rates.items()}
    if "base" in rates and "final" in rates:
        values["eval/pass_rate_delta"] = rates["final"] - rates["base"]
    return {**values, **comparison_metrics(table)}
