"""Warnings for tasks whose reference run uses most of a timeout.

A task whose oracle solution (or whose tests) needs more than 80 % of its
timeout passes on a quiet machine and fails under load — a flaky ground
truth. ``margin_warning`` checks one measured phase; ``taskrun`` logs it
after every solution and test run. ``oracle_timeout_warnings`` checks a whole
oracle eval run (its results rows) for reports and ``termrl tbcompat timing``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from termrl.artifacts.tasks import Task

__all__ = ["MARGIN", "margin_warning", "oracle_timeout_warnings", "warn_if_tight"]

MARGIN = 0.8
"""Share of a timeout above which a reference run is flagged."""

log = logging.getLogger("termrl.tbcompat")


def margin_warning(
    task_id: str, phase: str, used_sec: float | None, timeout_sec: float | None
) -> str | None:
    """A one-line warning when ``used_sec`` exceeds ``MARGIN`` of ``timeout_sec``; else None."""
    if not used_sec or not timeout_sec or used_sec <= MARGIN * timeout_sec:
        return None
    return (
        f"task {task_id}: {phase} took {used_sec:.1f}s, {100 * used_sec / timeout_sec:.0f} % of its "
        f"{timeout_sec:g}s timeout (over {100 * MARGIN:.0f} %: it may time out under load)"
    )


def warn_if_tight(
    task_id: str, phase: str, used_sec: float | None, timeout_sec: float | None
) -> str | None:
    """``margin_warning``, also logged on the ``termrl.tbcompat`` logger."""
    message = margin_warning(task_id, phase, used_sec, timeout_sec)
    if message:
        log.warning(message)
    return message


def oracle_timeout_warnings(tasks: Iterable[Task], rows: Iterable[dict[str, Any]]) -> list[str]:
    """Warnings for an oracle eval's results rows (``agent_sec``/``test_sec`` per trial)."""
    by_id = {t.id: t for t in tasks}
    warnings: list[str] = []
    for row in rows:
        task = by_id.get(row["task_id"])
        if task is None:
            continue
        for phase, used, timeout in (
            ("the oracle solution", row.get("agent_sec"), task.agent_timeout_sec),
            ("the tests", row.get("test_sec"), task.verifier_timeout_sec),
        ):
            message = margin_warning(task.id, phase, used, timeout)
            if message and message not in warnings:
                warnings.append(message)
    return warnings
