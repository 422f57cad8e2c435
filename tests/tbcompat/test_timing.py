"""timing: a reference run over 80 % of a timeout is flagged."""

from __future__ import annotations

import logging

from termrl.artifacts.tasks import Task
from termrl.tbcompat.timing import margin_warning, oracle_timeout_warnings, warn_if_tight


def test_margin_warning_fires_only_past_80_percent():
    assert margin_warning("t", "the tests", 48.0, 60.0) is None  # exactly 80 %: fine
    message = margin_warning("t", "the tests", 49.0, 60.0)
    assert message == (
        "task t: the tests took 49.0s, 82 % of its 60s timeout "
        "(over 80 %: it may time out under load)"
    )
    assert margin_warning("t", "the tests", None, 60.0) is None
    assert margin_warning("t", "the tests", 10.0, None) is None


def test_oracle_rows_are_checked_against_each_tasks_own_timeouts():
    tasks = [
        Task(id="slow-solve", instruction="x", agent_timeout_sec=100.0, verifier_timeout_sec=60.0),
        Task(id="slow-tests", instruction="x", agent_timeout_sec=100.0, verifier_timeout_sec=60.0),
        Task(id="fine", instruction="x", agent_timeout_sec=100.0, verifier_timeout_sec=60.0),
    ]
    rows = [
        {"task_id": "slow-solve", "agent_sec": 85.0, "test_sec": 5.0},
        {
            "task_id": "slow-solve",
            "agent_sec": 90.0,
            "test_sec": 5.0,
        },  # a second trial: one more warning
        {"task_id": "slow-tests", "agent_sec": 1.0, "test_sec": 55.0},
        {"task_id": "fine", "agent_sec": 79.0, "test_sec": 47.0},
        {"task_id": "not-in-tasks", "agent_sec": 1000.0, "test_sec": 1000.0},
    ]
    warnings = oracle_timeout_warnings(tasks, rows)
    assert [w.split(":")[0] for w in warnings] == [
        "task slow-solve",
        "task slow-solve",
        "task slow-tests",
    ]
    assert "the oracle solution took 85.0s, 85 %" in warnings[0]
    assert "the tests took 55.0s, 92 % of its 60s" in warnings[2]


def test_warn_if_tight_logs(caplog):
    with caplog.at_level(logging.WARNING, logger="termrl.tbcompat"):
        assert warn_if_tight("t", "the solution", 9.0, 10.0)
        assert warn_if_tight("t", "the solution", 1.0, 10.0) is None
    assert [r.getMessage() for r in caplog.records] == [
        margin_warning("t", "the solution", 9.0, 10.0)
    ]
