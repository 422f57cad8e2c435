"""The eval report: one self-contained HTML file, plots embedded as base64 PNG.

    write_report(out_path, [(label, rows), ...])       one run, or several side by side
    report_from_files(out_path, [a.parquet, ...])      the same from eval-results files
    compare_files(out_path, [(slot, path), ...])       a comparison of policies -> its KFP metrics

Contents, top to bottom: a summary table (accuracy, pass@k, failure modes,
tokens, turns, wall time, tool-call statistics; one column per run), plots
(pass rate by family and by difficulty, failure modes, turns, tokens and wall
time distributions, calls per turn and read-only vs state-changing calls),
the family and difficulty tables, the per-task table, and what the agent ran
in each failed trial (its transcript, folded per trial). Every pass rate
comes with its 95 % Wilson interval (``components.eval.stats``).

With several runs the first is the base: a comparison section shows each
run's pass rate and its paired difference vs the base (interval, tasks gained
and lost; ``components.eval.compare``), also per family, with the families
named as held-out-only ("not trained on") marked and summarised apart; the
per-task table shows every run's pass rate and the differences (B − A with
two runs), so a regression stands out.

The plots come from ``components.eval.report_plots``, drawn with matplotlib's
Agg backend (no display needed); the file references nothing outside itself,
so it opens anywhere — a KFP HTML artifact, a mail attachment, an air-gapped
laptop.
"""

from __future__ import annotations

import html
import os
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from components.eval.compare import (
    Rows,
    Run,
    comparison_metrics,
    family_table,
    format_diff,
    format_rate,
    policy_table,
)
from components.eval.report_plots import report_plots
from components.eval.summary import group_table, summarize, task_table
from components.eval.taxonomy import FAILURE_MODES
from termrl.artifacts.eval_results import read_eval_results

__all__ = ["compare_files", "render_report", "report_from_files", "write_report"]


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


def _failed_transcripts(runs: Sequence[Run]) -> str:
    """Each run's failed trials with what the agent ran in them; nothing when no row has a
    transcript (the oracle and nop agents, results written before transcripts were kept)."""
    parts = []
    for label, rows in runs:
        failed = sorted(
            (r for r in rows if not r.get("passed") and r.get("transcript")),
            key=lambda r: (r.get("family") or "", r["task_id"], r.get("trial") or 0),
        )
        items = "".join(
            f"<details><summary>{html.escape(r['task_id'])} · trial {r.get('trial', 0)} · "
            f"{html.escape(r.get('failure_mode') or 'failed')}</summary>"
            f"<pre>{html.escape(r['transcript'])}</pre></details>"
            for r in failed
        )
        if items:
            parts.append(f"<h3>{html.escape(label)} ({len(failed)} failed)</h3>{items}")
    return "<h2>What the agent ran in failed trials</h2>" + "".join(parts) if parts else ""


def _comparison(runs: Sequence[Run], heldout_families: Collection[str]) -> str:
    """Each policy's pass rate and its paired difference vs the first run, overall and per family."""
    return (
        _policy_comparison(runs, heldout_families)
        + _comparison_note(runs[0][0], heldout_families)
        + "<h3>By family (pp: percent points)</h3>"
        + _family_comparison(runs, heldout_families)
    )


def _policy_comparison(runs: Sequence[Run], heldout_families: Collection[str]) -> str:
    """One row per policy: overall, vs the first run, the left-out families and each difficulty."""
    table = policy_table(runs, heldout_families)
    header = [
        "policy",
        "tasks",
        "trials",
        "passed",
        "pass rate",
        "95 % CI",
        f"Δ vs {runs[0][0]}",
        "Δ 95 % CI",
        "paired tasks",
        "tasks gained",
        "tasks lost",
        "Δ interval",
    ]
    if heldout_families:
        header += ["left-out families: pass rate", "95 % CI", "trials"]
    difficulties = list(dict.fromkeys(d for row in table for d, _ in row.by_difficulty))
    for difficulty in difficulties:
        header += [f"same family, {difficulty}: pass rate", "95 % CI", "trials"]
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
    return _table(header, body, "comparison")


def _family_comparison(runs: Sequence[Run], heldout_families: Collection[str]) -> str:
    """One row per task family: each policy's pass rate and its difference vs the first run."""
    labels = [label for label, _ in runs]
    header = [
        "family",
        "not trained on",
        *(f"{label}: pass rate [95 % CI]" for label in labels),
        *(f"Δ {label} − {labels[0]} [95 % CI]" for label in labels[1:]),
    ]
    body = [
        [
            f.family,
            f.heldout,
            *(format_rate(r) + (f" of {r.n}" if r else "") for r in f.rates),
            *(format_diff(d) for d in f.vs_base[1:]),
        ]
        for f in family_table(runs, heldout_families)
    ]
    return _table(header, body, "families")


def _comparison_note(base: str, heldout_families: Collection[str]) -> str:
    """How the comparison's intervals are computed, and which families were never trained on."""
    left_out = (
        " Held-out families (not trained on): "
        + html.escape(", ".join(sorted(heldout_families)))
        + "."
        if heldout_families
        else ""
    )
    return (
        "<p>Pass rates are over trials with a 95 % Wilson score interval. Δ is the mean over the tasks both "
        "runs evaluated of the per-task difference in pass rate, with a 95 % paired interval: Newcombe's "
        "hybrid score interval when every task passed or failed outright in both runs, else the normal "
        "approximation over the per-task differences. Gained: tasks the policy passes more often than "
        f"{html.escape(base)}; lost: less often.{left_out}</p>"
    )


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.plots{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;border:1px solid #eee;padding:6px}
figcaption{font-size:12px;color:#555}
details{margin:2px 0}summary{cursor:pointer;font-size:13px}
pre{background:#f7f7f7;padding:6px;font-size:12px;white-space:pre-wrap;margin:4px 0 8px}
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
        for caption, png in report_plots(runs)
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
        f"<h2>Per task</h2>{_task_tables(runs)}" + _failed_transcripts(runs) + "</body></html>"
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
