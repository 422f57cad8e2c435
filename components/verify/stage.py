"""The verify stage's entry point: tasks artifact in, verdicts and admitted tasks out."""

from __future__ import annotations

import asyncio

from components.verify.admission import Verdict, summary
from components.verify.config import VerifyConfig
from components.verify.runner import verify_tasks
from termrl.artifacts import load_tasks, save_tasks, write_verdicts

__all__ = ["main"]


def main(config: VerifyConfig) -> list[Verdict]:
    """Validate, verify every task, write both artifacts, print the summary."""
    config.validate()
    tasks = load_tasks(config.tasks)
    verdicts = asyncio.run(verify_tasks(tasks, config))
    write_verdicts(config.out, [v.to_row() for v in verdicts])
    admitted = {v.task_id for v in verdicts if v.admitted}
    save_tasks(config.admitted, [t for t in tasks if t.id in admitted])
    print(summary(verdicts))
    return verdicts
