"""The eval stage from top to bottom: ``main(config)``.

    validate ─► load tasks ─► run trials in sandboxes ─► write results ─► write report

Returns the run's summary (``components.eval.summary.summarize``), whose
numbers the KFP component logs as Metrics (``flat_metrics``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from components.eval.config import EvalConfig
from components.eval.report import write_report
from components.eval.summary import summarize
from components.eval.trials import load_eval_tasks, run_trials
from termrl.artifacts.eval_results import write_eval_results

__all__ = ["main"]


def main(config: EvalConfig) -> dict[str, Any]:
    """Evaluate ``config.agent`` on the tasks; write the results (and the report)."""
    config.validate()
    tasks = load_eval_tasks(config)
    rows = asyncio.run(run_trials(config, tasks))
    write_eval_results(config.out, rows)
    if config.report:
        write_report(config.report, [(config.label(), rows)])
    return summarize(rows)
