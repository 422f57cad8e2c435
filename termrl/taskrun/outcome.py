"""The tests' verdict: read from the reward file or pytest's report, as the task's ``scoring`` says.

``termrl.reward`` holds the two rules: a reward file counts only as a regular
file holding a finite number in [0, 1] (else ``RewardFailed``, never a pass;
with no such path the tests' exit status decides); pytest's report passes when
it lists at least one PASSED test and no FAILED or ERROR one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from termrl.artifacts.tasks import Task
from termrl.errors import RewardFailed
from termrl.reward import parse_pytest_report
from termrl.taskrun.session import CommandResult
from termrl.tbcompat.timing import warn_if_tight

__all__ = ["TestOutcome", "read_outcome"]


@dataclass(frozen=True)
class TestOutcome:
    """The task's verdict on the sandbox's current state."""

    passed: bool
    reward: float
    output: str
    duration: float
    timed_out: bool
    exit_code: int | None = None
    tampering: tuple[str, ...] = ()
    """Changes the agent made to what scoring runs (``find_tampering``): flagged, not failed, since
    installing software is often the task itself."""
    unscorable: str = ""
    """Why scoring's own set-up could not run in the sandbox the agent left (``SandboxUnscorable``:
    its bash or mkdir gone, a library they load moved); such an outcome is a failure, reward 0."""

    __test__ = False  # not a pytest class


async def read_outcome(
    task: Task,
    result: CommandResult,
    started: float,
    timeout: float,
    tampering: tuple[str, ...],
    read_reward: Callable[[int | None], Awaitable[float]],
) -> TestOutcome:
    """The tests' outcome from their run, following the task's ``scoring``.

    ``read_reward`` reads the reward file (from the host's copy or the sandbox)
    given the tests' exit status; it is not called for pytest-report scoring.
    """
    duration = time.monotonic() - started
    warn_if_tight(task.id, "the tests", duration, timeout)
    if result.timed_out:
        return TestOutcome(False, 0.0, result.output, duration, True, tampering=tampering)
    if task.scoring == "pytest-report":
        passed = parse_pytest_report(result.output)
        return TestOutcome(
            passed, float(passed), result.output, duration, False, result.exit_code, tampering
        )
    try:
        reward = await read_reward(result.exit_code)
    except RewardFailed as exc:
        if exc.log_tail:
            raise
        raise RewardFailed(
            str(exc), log_tail=result.output[-2000:]
        ) from exc  # with what the tests printed
    return TestOutcome(
        reward >= 1.0, reward, result.output, duration, False, result.exit_code, tampering
    )
