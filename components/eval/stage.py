"""The eval stage from top to bottom: ``main(config)``.

    validate ─► load tasks ─► run the trials not on disk yet ─► merge results ─► write report

Each finished trial is written beside the output at once
(``components.eval.resume``), so a rerun after a crash or a stop runs only
what is missing. Returns the run's summary
(``components.eval.summary.summarize``), whose numbers the KFP component logs
as Metrics (``flat_metrics``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from components.eval.config import EvalConfig
from components.eval.report import write_report
from components.eval.resume import TrialParts, fingerprint, resume_trials
from components.eval.summary import summarize
from components.eval.trials import load_eval_tasks

__all__ = ["main"]


def main(config: EvalConfig) -> dict[str, Any]:
    """Evaluate ``config.agent`` on the tasks; write the results (and the report)."""
    config.validate()
    tasks = load_eval_tasks(config)
    parts = TrialParts(config.parts_dir(), fingerprint(config, tasks))
    rows = asyncio.run(resume_trials(config, tasks, parts))
    parts.merge(rows, config.out)
    if config.report:
        write_report(config.report, [(config.label(), rows)])
    return summarize(rows)
