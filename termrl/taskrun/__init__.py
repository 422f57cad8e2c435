"""Run a task in a fresh sandbox, its reference solution and its tests — the official way.

Every stage that runs a task (rollout's episodes, eval's trials, verify's
checks) gets its sandbox, and every stage that needs a task's outcome
(verify's ground truth and no-op, eval's oracle and scoring, rollout's
reward) scores it, through these calls, so a task starts and is scored the
same everywhere:

    sandboxes = TaskSandboxes(manager)        one per stage run, over one SandboxManager
    async with sandboxes.open(task) as session:
        build(task)                           the task's image, once per image key (a failed
                                              build is remembered: EnvInitFailed for every
                                              later task with that image)
        manager.create(spec(task))            a fresh session; waits for one of the manager's
                                              max_sessions slots, the only bound on sandboxes
        remove_leftovers(session)             no /solution, /tests, /logs/verifier from set-up
        ... the agent works ...
        await run_solution(session, task)     upload solution_files to /solution, run it
        await run_tests(session, task)        score the sandbox's state, out of the agent's reach (scoring.py)

Tests and the solution are uploaded only here, so they are never inside the
sandbox while an agent works. So is a Terminal-Bench task's offline test kit
(``termrl.tbcompat``: uv, the pinned test wheels, ``PIP_NO_INDEX``/``PIP_FIND_LINKS``
and a uv config for the test command). The image never carries them
(``SandboxSpec.from_task``), and whatever its Dockerfile left at those paths
is removed by ``open`` before the session is handed out. A run using more
than 80 % of its timeout is logged as a warning (it may flip under load).

The modules: ``session`` (what a sandbox session must offer, the shared
paths), ``sandboxes`` (``TaskSandboxes``, ``remove_leftovers``), ``solution``
(``run_solution``), ``scoring`` (``run_tests``: the integrity rules) and
``outcome`` (``TestOutcome``, read from the reward file or pytest's report).
"""

from termrl.taskrun.outcome import TestOutcome
from termrl.taskrun.sandboxes import TaskSandboxes, remove_leftovers
from termrl.taskrun.scoring import pytest_addopts, run_tests
from termrl.taskrun.session import (
    DEFAULT_AGENT_TIMEOUT_SEC,
    DEFAULT_VERIFIER_TIMEOUT_SEC,
    LEFTOVERS,
    SOLUTION_DIR,
    TESTS_DIR,
    TaskSession,
)
from termrl.taskrun.solution import SolutionOutcome, run_solution, solution_steps

__all__ = [
    "DEFAULT_AGENT_TIMEOUT_SEC",
    "DEFAULT_VERIFIER_TIMEOUT_SEC",
    "LEFTOVERS",
    "SOLUTION_DIR",
    "TESTS_DIR",
    "SolutionOutcome",
    "TaskSandboxes",
    "TaskSession",
    "TestOutcome",
    "pytest_addopts",
    "remove_leftovers",
    "run_solution",
    "run_tests",
    "solution_steps",
]
