"""The synthesize stage: procedural tasks (and optionally LLM-written ones) into a tasks artifact.

validate → read the tasks to avoid → generate procedurally → ask the LLM (if configured) → write
→ summary
"""

from __future__ import annotations

import click

from components.synthesize.config import SynthesizeConfig
from components.synthesize.dedup import NearDuplicateFilter
from components.synthesize.generate import generate_tasks
from components.synthesize.report import SynthesisReport, summary_table
from termrl.artifacts import load_tasks, save_tasks

__all__ = ["main"]


def main(config: SynthesizeConfig) -> SynthesisReport:
    """Run the stage with ``config``; returns the report whose table it printed."""
    config.validate()
    seen = NearDuplicateFilter(config.dedup_threshold, config.shingle_size)
    avoided = load_tasks(config.avoid) if config.avoid else []
    for task in avoided:  # never admitted: their near-duplicates are dropped too
        seen.admit(task.instruction)
    report = generate_tasks(config, seen, frozenset(t.id for t in avoided))
    if config.llm_model:
        from components.synthesize.llm import synthesize_with_llm  # litellm is slow to import

        llm = synthesize_with_llm(config, seen)
        report.tasks += llm.tasks
        report.duplicates += llm.duplicates
        report.llm_requested, report.llm_accepted, report.llm_rejected = (
            llm.llm_requested,
            llm.llm_accepted,
            llm.llm_rejected,
        )
        report.seconds += llm.seconds
    save_tasks(config.out, report.tasks)
    click.echo(summary_table(report))
    return report
