"""What a synthesize run produced, and the summary table it prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from termrl.artifacts import Task

__all__ = ["SynthesisReport", "summary_table"]


@dataclass
class SynthesisReport:
    """The tasks of a run plus the counts a reader needs to trust it."""

    tasks: list[Task] = field(default_factory=list)
    attempts: int = 0
    """Procedural generation attempts (kept + near-duplicates)."""
    duplicates: int = 0
    """Tasks dropped as near-duplicates (procedural and LLM)."""
    llm_requested: int = 0
    llm_accepted: int = 0
    llm_rejected: Counter[str] = field(default_factory=Counter)
    """Rejected LLM replies by reason."""
    seconds: float = 0.0


def summary_table(report: SynthesisReport) -> str:
    """A plain-text table: tasks per family x difficulty, perturbed counts, and the run's counters."""
    levels = sorted({t.difficulty for t in report.tasks}, key=["easy", "medium", "hard"].index)
    families = sorted({t.family for t in report.tasks})
    cells = Counter((t.family, t.difficulty) for t in report.tasks)
    perturbed = Counter(t.family for t in report.tasks if t.perturbations)
    llm = Counter(t.family for t in report.tasks if t.metadata.get("generator") == "llm")
    header = ["family", *levels, "total", "perturbed", "llm"]
    rows = [
        [
            f,
            *(str(cells[f, lv]) for lv in levels),
            str(sum(cells[f, lv] for lv in levels)),
            str(perturbed[f]),
            str(llm[f]),
        ]
        for f in families
    ]
    rows.append(
        [
            "total",
            *(str(sum(cells[f, lv] for f in families)) for lv in levels),
            str(len(report.tasks)),
            str(sum(perturbed.values())),
            str(sum(llm.values())),
        ]
    )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r):
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )

    lines = [fmt(header), "  ".join("-" * w for w in widths), *map(fmt, rows[:-1]), fmt(rows[-1])]
    lines.append(
        f"{len(report.tasks)} tasks in {report.seconds:.1f} s; {report.attempts} procedural attempts, "
        f"{report.duplicates} near-duplicates dropped"
    )
    if report.llm_requested:
        lines.append(
            f"LLM: {report.llm_requested} requested, {report.llm_accepted} accepted, "
            f"{sum(report.llm_rejected.values())} rejected"
        )
        lines += [f"  rejected ({n}): {reason}" for reason, n in report.llm_rejected.most_common()]
    return "\n".join(lines)
