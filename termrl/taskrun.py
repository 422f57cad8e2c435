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
        await run_tests(session, task)        upload test_files to /tests, run test_command
                                              from the image's workdir with TEST_DIR=/tests,
                                              turn the outcome into a reward

Scoring follows the task's ``scoring`` column:

- ``reward-file`` (Harbor): the float in /logs/verifier/reward.txt; when the
  script wrote none, its exit status (0 → 1.0, else 0.0).
- ``pytest-report`` (Terminal-Bench 1.0): passed when pytest's report lists at
  least one PASSED test and no FAILED or ERROR one.

Tests and the solution are uploaded only here, so they are never inside the
sandbox while an agent works. So is a Terminal-Bench task's offline test kit
(``termrl.tbcompat``: uv, the pinned test wheels, ``PIP_NO_INDEX``/``PIP_FIND_LINKS``
and a uv config for the test command). The image never carries them
(``SandboxSpec.from_task``), and whatever its Dockerfile left at those paths
is removed by ``open`` before the session is handed out. A run using more
than 80 % of its timeout is logged as a warning (it may flip under load).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import yaml

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import EnvInitFailed, ResetFailed, RewardFailed, TermrlError, TransientError
from termrl.sandbox.spec import SandboxSpec
from termrl.tbcompat.testphase import prepare_test_phase
from termrl.tbcompat.timing import warn_if_tight

if TYPE_CHECKING:
    from termrl.sandbox.manager import SandboxManager
    from termrl.sandbox.session import Session

__all__ = [
    "LEFTOVERS",
    "SolutionOutcome",
    "TaskSandboxes",
    "TestOutcome",
    "parse_pytest_report",
    "remove_leftovers",
    "run_solution",
    "run_tests",
    "solution_steps",
]

VERIFIER_DIR = "/logs/verifier"
REWARD_FILE = f"{VERIFIER_DIR}/reward.txt"
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
LEFTOVERS = (SOLUTION_DIR, TESTS_DIR, VERIFIER_DIR)
"""Paths that must not exist when a sandbox is handed out: tests and solution come at scoring."""
DEFAULT_AGENT_TIMEOUT_SEC = 600.0
DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0


class _Result(Protocol):
    output: str
    exit_code: int | None
    timed_out: bool


class _Session(Protocol):
    """The part of ``termrl.sandbox.Session`` used here."""

    workdir: str

    async def exec(self, command: str, timeout: float = ...) -> _Result: ...
    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None: ...
    async def download(self, path: str) -> bytes: ...


@dataclass(frozen=True)
class SolutionOutcome:
    """What running the reference solution did."""

    exit_code: int | None
    timed_out: bool
    duration: float
    output: str


@dataclass(frozen=True)
class TestOutcome:
    """The task's verdict on the sandbox's current state."""

    passed: bool
    reward: float
    output: str
    duration: float
    timed_out: bool
    exit_code: int | None = None

    __test__ = False  # not a pytest class


def solution_steps(task: Task) -> list[str]:
    """The solution as shell commands: the task's command, or a solution.yaml's list."""
    if task.solution_command:
        return [task.solution_command]
    spec = next((f for f in task.solution_files if f.path == "solution.yaml"), None)
    if spec is None:
        return []
    try:
        entries = yaml.safe_load(spec.data.decode())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"task {task.id}: unreadable solution.yaml: {exc}") from exc
    if not isinstance(entries, list):
        raise ValueError(f"task {task.id}: solution.yaml is not a list of commands")
    steps = []
    for entry in entries:
        command = entry.get("command") if isinstance(entry, dict) else entry
        if not isinstance(command, str):
            raise ValueError(f"task {task.id}: solution.yaml entry without a command: {entry!r}")
        steps.append(command)
    return steps


def _in_workdir(session: _Session, command: str, env: dict[str, str]) -> str:
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # A subshell: the agent's shell state (cwd, functions, aliases) must not leak in.
    return f"(cd {shlex.quote(session.workdir)} && {assignments} {command})"


async def run_solution(session: _Session, task: Task, *, timeout: float | None = None) -> SolutionOutcome:
    """Upload the solution files to /solution and run the solution under the agent timeout."""
    timeout = timeout or task.agent_timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC
    if task.solution_files:
        await session.upload_files(task.solution_files, SOLUTION_DIR)
    started = time.monotonic()
    outputs: list[str] = []
    exit_code: int | None = 0
    for step in solution_steps(task):
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            return SolutionOutcome(None, True, time.monotonic() - started, "".join(outputs))
        result = await session.exec(_in_workdir(session, step, {}), timeout=remaining)
        outputs.append(result.output)
        exit_code = result.exit_code
        if result.timed_out:
            return SolutionOutcome(None, True, time.monotonic() - started, "".join(outputs))
    warn_if_tight(task.id, "the solution", time.monotonic() - started, timeout)
    return SolutionOutcome(exit_code, False, time.monotonic() - started, "".join(outputs))


_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR)\b", re.MULTILINE)


def parse_pytest_report(output: str) -> bool:
    """Terminal-Bench 1.0's rule: at least one PASSED and no FAILED or ERROR line."""
    outcomes = _PYTEST_LINE.findall(output)
    return "PASSED" in outcomes and "FAILED" not in outcomes and "ERROR" not in outcomes


async def run_tests(session: _Session, task: Task, *, timeout: float | None = None) -> TestOutcome:
    """Upload the tests, run them, and read the reward. Raises ``RewardFailed`` if unreadable."""
    timeout = timeout or task.verifier_timeout_sec or DEFAULT_VERIFIER_TIMEOUT_SEC
    await session.upload_files(task.test_files, TESTS_DIR)
    env = {"TEST_DIR": TESTS_DIR, **await prepare_test_phase(session, task)}
    started = time.monotonic()
    prepare = await session.exec(f"rm -f {REWARD_FILE}; mkdir -p {VERIFIER_DIR}", timeout=30)
    if prepare.exit_code != 0:
        raise RewardFailed(f"task {task.id}: cannot prepare {VERIFIER_DIR}", log_tail=prepare.output[-2000:])
    result = await session.exec(_in_workdir(session, task.test_command, env), timeout=timeout)
    duration = time.monotonic() - started
    warn_if_tight(task.id, "the tests", duration, timeout)
    if result.timed_out:
        return TestOutcome(False, 0.0, result.output, duration, True)
    if task.scoring == "pytest-report":
        passed = parse_pytest_report(result.output)
        return TestOutcome(passed, float(passed), result.output, duration, False, result.exit_code)
    if task.scoring != "reward-file":
        raise RewardFailed(f"task {task.id}: unknown scoring {task.scoring!r}")
    try:
        text = (await session.download(REWARD_FILE)).decode().strip()
    except FileNotFoundError:
        reward = 1.0 if result.exit_code == 0 else 0.0
    else:
        try:
            reward = float(text)
        except ValueError as exc:
            raise RewardFailed(
                f"task {task.id}: {REWARD_FILE} holds {text[:80]!r}, not a number", log_tail=result.output[-2000:]
            ) from exc
    return TestOutcome(reward >= 1.0, reward, result.output, duration, False, result.exit_code)


async def remove_leftovers(session: _Session) -> None:
    """Bring a fresh sandbox to the task's start state: no tests, no solution, no reward file.

    The image never contains them (``SandboxSpec.from_task``), but a Dockerfile
    may have created such paths; nobody working in the sandbox may find them.
    ``ResetFailed`` when they cannot be removed; a ``TransientError`` passes through.
    """
    paths = " ".join(LEFTOVERS)
    checks = " && ".join(f"[ ! -e {p} ]" for p in LEFTOVERS)
    try:
        result = await session.exec(f"rm -rf {paths}; {checks}", 30.0)
    except TransientError:
        raise
    except TermrlError as exc:
        raise ResetFailed(f"reset failed: {exc}") from exc
    if result.timed_out or result.exit_code != 0:
        raise ResetFailed("set-up leftovers could not be removed", log_tail=result.output[-2000:])


class TaskSandboxes:
    """The one path from a task to a ready sandbox: build each image once, fresh session, leftovers removed.

    How many sandboxes are alive at once is the manager's ``max_sessions``
    (``open`` waits there for a slot); nothing here adds a second bound.
    ``lifetime_sec`` gives each task's sandbox its lifetime (default: the
    ``SandboxSpec`` default).
    """

    def __init__(self, manager: SandboxManager, *, lifetime_sec: Callable[[Task], float] | None = None) -> None:
        self.manager = manager
        self.lifetime_sec = lifetime_sec
        self._builds: dict[str, asyncio.Future[None]] = {}

    def spec(self, task: Task) -> SandboxSpec:
        """The task's sandbox: its environment and limits (never its tests or solution)."""
        if self.lifetime_sec is None:
            return SandboxSpec.from_task(task)
        return SandboxSpec.from_task(task, lifetime_sec=self.lifetime_sec(task))

    async def build(self, task: Task) -> None:
        """Build (or find cached) the task's image once per image key; a failed build is remembered and
        re-raised (EnvInitFailed) for every later task with that image; a cancelled build lets the next caller retry."""
        await self._build(self.spec(task))

    async def _build(self, spec: SandboxSpec) -> None:
        key = spec.image_key
        while (pending := self._builds.get(key)) is not None:
            try:
                await asyncio.shield(pending)  # EnvInitFailed of an earlier build re-raises here
                return
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not pending.cancelled() or (current is not None and current.cancelling()):
                    raise
                # The caller that was building got cancelled, not this one: build here.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._builds[key] = future
        try:
            await self.manager.build_image(spec)
        except BaseException as exc:
            if isinstance(exc, EnvInitFailed):
                future.set_exception(exc)
                future.exception()  # marked retrieved; later waiters re-raise it
            else:  # cancelled, unavailable or unexpected: let the next caller try again
                del self._builds[key]
                future.cancel()
            raise
        future.set_result(None)

    @asynccontextmanager
    async def open(self, task: Task) -> AsyncIterator[Session]:
        """build(task), create a session, remove set-up leftovers and check they are gone (ResetFailed otherwise,
        TransientError passes through), yield it, close it."""
        spec = self.spec(task)
        await self._build(spec)
        async with await self.manager.create(spec) as session:
            await remove_leftovers(session)
            yield session
