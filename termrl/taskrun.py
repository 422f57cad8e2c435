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
        await run_tests(session, task)        score the sandbox's state, out of the agent's reach (below)

Scoring is what the policy optimises, so nothing the agent did may reach it
(DESIGN.md, "Scoring integrity"). ``run_tests``:

1. stops the agent's processes (``Session.agent_stopped``, SIGSTOP from the
   host): everything in the sandbox but its init and its *services*, the
   processes holding a listening socket and their children. Terminal-Bench's
   tests talk to services the agent started, so those keep running; a loop
   the agent left behind that writes ``1`` into the reward file, swaps
   /tests/test.sh after the upload or writes into the tests' output is
   stopped before the tests start and resumed after the reward is read (the
   session stays usable). Only stopped, not killed: freezing every non-service
   needs no declaration from the task and loses nothing. Meanwhile the system
   folders (/usr, /etc, /bin, /sbin, /lib*) are read-only for every process
   of the sandbox but the tests' (``Session.system_paths_frozen``): a service
   cannot replace what the tests run once the tampering check (below) is done.
2. runs everything through a fresh process (``Session.exec_fresh``), never the
   agent's shell: no shell functions, aliases, ``BASH_ENV`` or ``PATH`` the
   agent set, ``bash --noprofile --norc``, the sandbox's configured
   environment only, its exit status from the process itself, with the
   sandbox's own capabilities, seccomp filter, user and cgroups.
3. removes /tests and /logs/verifier and recreates them (a conftest.py or
   reward file planted there is gone). Where the backend can
   (``Session.private_binds``: bwrap, rootful podman) the tests then run with
   host directories mounted over those two paths for their process alone
   (/tests read-only), in a user namespace of their own, so nothing in the
   sandbox, a service included, can see or write them, or reach the tests'
   files and output through ``/proc/<pid>``; the reward is read from the
   host's copy. Their paths, and every folder above them, are pinned in the
   sandbox while the tests run (``termrl/sandbox/enter.py``): a service cannot
   rename /tests away and put its own in its place. Terminal-Bench's offline
   test kit (uv, the ``env`` file the script sources, the wheels) is mounted
   the same way, read-only, and so, writable and empty, are uv's cache and a
   ``.venv`` the test script makes in the working directory
   (``termrl.tbcompat.testphase``). On Kubernetes the pod's verifier container
   does the entering (``termrl.sandbox.kubernetes_verifier``). Elsewhere (a
   remote or rootless podman) the tests and the kit are uploaded into the
   sandbox, and uv's cache is emptied.
4. runs ``test_command`` from the image's workdir with ``TEST_DIR=/tests``
   and ``PYTEST_ADDOPTS`` confining pytest to /tests (``pytest_addopts``: no
   conftest.py or configuration file from / or the working directory).
5. turns the outcome into a reward, following the task's ``scoring`` column
   (``termrl.reward``: a reward file only as a regular file holding a finite
   number in [0, 1], else ``RewardFailed`` and never a pass; or pytest's report).

What stays open, on every backend: binaries the agent replaced in system
paths before scoring (a ``/usr/local/bin/bash``, a pytest plugin installed
into site-packages or into a ``.venv`` it left in the working directory,
a ``pytest.py`` there that ``python3 -m pytest`` imports first) run during the tests, with
no more privilege than the agent had, and are flagged
(``termrl.tampering.find_tampering``, ``TestOutcome.tampering``); a service
can still change, while the tests run, files outside the system folders that
they use and did not make in a private mount: the project files ``uv init``
writes into the working directory (a path dependency added to its
pyproject.toml), a ``.venv`` that was there before the tests.

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
import logging
import os
import shlex
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import yaml

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import EnvInitFailed, ResetFailed, RewardFailed, TermrlError, TransientError
from termrl.reward import (
    VERIFIER_DIR,
    parse_pytest_report,
    read_host_reward,
    read_sandbox_reward,
)
from termrl.sandbox.session import relative_inside
from termrl.sandbox.spec import SandboxSpec, resolve_env
from termrl.tampering import find_tampering
from termrl.tbcompat.runnable import unmet_requirements
from termrl.tbcompat.testphase import prepare_test_phase, remove_mount_points
from termrl.tbcompat.timing import warn_if_tight
from termrl.verifierenv import collect_artifacts

if TYPE_CHECKING:
    from termrl.sandbox.manager import SandboxManager
    from termrl.sandbox.session import Session

__all__ = [
    "LEFTOVERS",
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

log = logging.getLogger("termrl.taskrun")

TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
LEFTOVERS = (SOLUTION_DIR, TESTS_DIR, VERIFIER_DIR)
"""Paths that must not exist when a sandbox is handed out: tests and solution come at scoring."""
PYTEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
"""pytest's configuration files, in the order it prefers them within one directory."""

FRESH_TEST_DIRS = f"rm -rf {TESTS_DIR} {VERIFIER_DIR} && {{ [ ! -L /logs ] || rm -f /logs; }} && mkdir -p {TESTS_DIR} {VERIFIER_DIR}"
"""Whatever the agent left at the tests' and verifier's paths goes: a planted conftest.py, a reward
file, a symlink that would send the reward elsewhere."""

_OPENED: dict[int, TaskSandboxes] = {}
"""The TaskSandboxes each open session (by id, while ``TaskSandboxes.open`` holds it) came from."""
DEFAULT_AGENT_TIMEOUT_SEC = 600.0
DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0


class _Result(Protocol):
    output: str
    exit_code: int | None
    timed_out: bool


class TaskSession(Protocol):
    """The part of ``termrl.sandbox.Session`` that running and scoring a task use."""

    workdir: str
    private_binds: bool

    async def exec(self, command: str, timeout: float = ...) -> _Result: ...
    async def exec_fresh(
        self,
        command: str,
        timeout: float = ...,
        *,
        env: dict[str, str] | None = ...,
        workdir: str | None = ...,
        binds: dict[str, tuple[str, bool]] | None = ...,
        user: str | None = ...,
    ) -> _Result: ...
    async def close(self) -> None: ...
    def agent_stopped(self) -> AbstractAsyncContextManager[None]: ...
    def system_paths_frozen(self) -> AbstractAsyncContextManager[None]: ...
    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None: ...
    async def changed_files(self) -> dict[str, str] | None: ...


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
    tampering: tuple[str, ...] = ()
    """Changes the agent made to what scoring runs (``find_tampering``): flagged, not failed, since
    installing software is often the task itself."""

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


def _in_workdir(session: TaskSession, command: str, env: dict[str, str]) -> str:
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # A subshell: the agent's shell state (cwd, functions, aliases) must not leak in.
    return f"(cd {shlex.quote(session.workdir)} && {assignments} {command})"


async def run_solution(
    session: TaskSession, task: Task, *, timeout: float | None = None
) -> SolutionOutcome:
    """Upload the solution files to /solution and run the solution under the agent timeout."""
    timeout = timeout or task.agent_timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC
    if task.solution_files:
        await session.upload_files(task.solution_files, SOLUTION_DIR)
    solution_env = {**resolve_env(task.env), **resolve_env(task.solution_env)}
    started = time.monotonic()
    outputs: list[str] = []
    exit_code: int | None = 0
    for step in solution_steps(task):
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            return SolutionOutcome(None, True, time.monotonic() - started, "".join(outputs))
        result = await session.exec(_in_workdir(session, step, solution_env), timeout=remaining)
        outputs.append(result.output)
        exit_code = result.exit_code
        if result.timed_out:
            return SolutionOutcome(None, True, time.monotonic() - started, "".join(outputs))
    warn_if_tight(task.id, "the solution", time.monotonic() - started, timeout)
    return SolutionOutcome(exit_code, False, time.monotonic() - started, "".join(outputs))


def pytest_addopts(task: Task) -> str:
    """``PYTEST_ADDOPTS`` of the test phase: pytest reads its configuration and conftest files from /tests only.

    ``--confcutdir`` stops the conftest.py search at /tests (a conftest.py the
    agent left at / or in the working directory is not loaded); ``-c`` names
    the configuration file, so a pytest.ini or pyproject.toml planted above
    /tests is never read: the task's own, or none (``/dev/null``);
    ``--rootdir`` and ``-p no:cacheprovider`` keep pytest from looking for
    (or writing) a cache elsewhere. Options the test command passes itself
    come later on pytest's command line and win.
    """
    shipped = {f.path for f in task.test_files}
    config = next((name for name in PYTEST_CONFIG_FILES if name in shipped), None)
    ini = f"{TESTS_DIR}/{config}" if config else "/dev/null"
    return f"-p no:cacheprovider --rootdir={TESTS_DIR} --confcutdir={TESTS_DIR} -c {ini}"


async def run_tests(
    session: TaskSession, task: Task, *, timeout: float | None = None
) -> TestOutcome:
    """Run the task's tests out of the agent's reach and read the reward (see the module docstring).

    Raises ``RewardFailed`` when the verifier directory cannot be prepared or
    the reward file is unusable; never turns an unusable reward into a pass.
    A separate verifier (``task.verifier_mode``) closes ``session`` and scores in
    a fresh sandbox; ``session`` must then come from ``TaskSandboxes.open``.
    """
    timeout = timeout or task.verifier_timeout_sec or DEFAULT_VERIFIER_TIMEOUT_SEC
    if task.scoring not in ("reward-file", "pytest-report"):
        raise RewardFailed(f"task {task.id}: unknown scoring {task.scoring!r}")
    if task.steps:
        raise RewardFailed(
            f"task {task.id} has {len(task.steps)} steps: score it step by step (termrl.multistep)"
        )
    if task.verifier_mode == "separate":
        return await _run_separate(session, task, timeout)
    async with session.agent_stopped(), _system_paths_frozen(session, task):
        tampering = await find_tampering(session)  # before the tests install anything themselves
        if tampering:
            log.warning(
                "task %s: the agent changed what scoring runs: %s", task.id, "; ".join(tampering)
            )
        return await _score(session, task, timeout, tampering)


@asynccontextmanager
async def _system_paths_frozen(session: TaskSession, task: Task) -> AsyncIterator[None]:
    """``Session.system_paths_frozen``; failing to freeze fails the scoring (never scored unfrozen)."""
    entered = False
    try:
        async with session.system_paths_frozen():
            entered = True
            yield
    except OSError as exc:
        if entered:
            raise
        raise RewardFailed(f"task {task.id}: cannot freeze the system folders: {exc}") from exc


async def _run_separate(session: TaskSession, task: Task, timeout: float) -> TestOutcome:
    """Collect the artifacts, end the agent's sandbox, score in a fresh one fed only the artifacts."""
    sandboxes = _OPENED.get(id(session))
    if sandboxes is None:
        raise RewardFailed(
            f"task {task.id}: a separate verifier needs a session from TaskSandboxes.open"
        )
    async with session.agent_stopped():
        artifacts = await collect_artifacts(session, task)  # type: ignore[arg-type]
    # The agent's processes end before the verifier starts (and its sandbox slot is free for the verifier's).
    await session.close()
    async with sandboxes.open(task, verifier=True) as fresh:
        if artifacts:
            await fresh.upload_files(artifacts, "/")
        return await _score(fresh, task, timeout, ())


async def _score(
    session: TaskSession, task: Task, timeout: float, tampering: tuple[str, ...]
) -> TestOutcome:
    """Steps 3 to 5 of the module docstring: fresh test directories, the tests, the reward."""
    started = time.monotonic()
    prepare = await session.exec_fresh(FRESH_TEST_DIRS, timeout=30)
    if prepare.exit_code != 0:
        raise RewardFailed(
            f"task {task.id}: cannot prepare {TESTS_DIR} and {VERIFIER_DIR}",
            log_tail=prepare.output[-2000:],
        )
    env = {
        **resolve_env(task.env),
        **resolve_env(task.verifier_env),
        "TEST_DIR": TESTS_DIR,
        "PYTEST_ADDOPTS": pytest_addopts(task),
    }
    user = task.verifier_user
    if session.private_binds:
        with tempfile.TemporaryDirectory(prefix="termrl-scoring-") as host:
            tests, verifier = _write_host_dirs(host, task.test_files)
            phase = await prepare_test_phase(session, task, Path(host))
            try:
                result = await session.exec_fresh(
                    task.test_command,
                    timeout=timeout,
                    env=env | phase.env,
                    workdir=session.workdir,
                    binds={TESTS_DIR: (tests, True), VERIFIER_DIR: (verifier, False)} | phase.binds,
                    user=user,
                )
            finally:
                await remove_mount_points(session, phase)
            if result.exit_code in (125, 126) and result.output.startswith("termrl-enter:"):
                raise RewardFailed(  # e.g. a path of the tests' mounts behind a symbolic link
                    f"task {task.id}: the tests could not be started: {result.output.strip()}",
                    log_tail=result.output[-2000:],
                )
            read_reward = lambda code: asyncio.to_thread(read_host_reward, task.id, verifier, code)  # noqa: E731
            return await _outcome(task, result, started, timeout, tampering, read_reward)
    env |= (await prepare_test_phase(session, task)).env
    await session.upload_files(task.test_files, TESTS_DIR)
    if user is not None:  # the verifier's user writes the reward file
        await session.exec_fresh(f"chmod 0777 {VERIFIER_DIR}", timeout=30)
    result = await session.exec_fresh(
        task.test_command, timeout=timeout, env=env, workdir=session.workdir, user=user
    )
    return await _outcome(
        task,
        result,
        started,
        timeout,
        tampering,
        lambda code: read_sandbox_reward(session, task.id, code),
    )


async def _outcome(
    task: Task,
    result: _Result,
    started: float,
    timeout: float,
    tampering: tuple[str, ...],
    read_reward: Callable[[int | None], Awaitable[float]],
) -> TestOutcome:
    """The tests' outcome from their run, following the task's ``scoring``."""
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


def _write_host_dirs(host: str, files: list[TaskFile]) -> tuple[str, str]:
    """The tests and an empty verifier directory under ``host``, for the scoring process alone."""
    tests, verifier = os.path.join(host, "tests"), os.path.join(host, "verifier")
    os.mkdir(tests, 0o755)
    os.mkdir(verifier, 0o777)
    os.chmod(
        verifier, 0o777
    )  # whatever user the tests run as writes the reward (mkdir's mode is masked)
    os.chmod(host, 0o755)
    for file in files:
        try:
            target = os.path.join(tests, relative_inside(file.path))  # the rule uploads follow
        except ValueError as exc:
            raise RewardFailed(f"test file path outside {TESTS_DIR}: {file.path!r}") from exc
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        with open(target, "wb") as f:
            f.write(file.data)
        os.chmod(target, file.mode)
    return tests, verifier


async def remove_leftovers(session: TaskSession, *, user: str | None = None) -> None:
    """Bring a fresh sandbox to the task's start state: no tests, no solution, no reward file.

    The image never contains them (``SandboxSpec.from_task``), but a Dockerfile
    may have created such paths; nobody working in the sandbox may find them.
    ``ResetFailed`` when they cannot be removed; a ``TransientError`` passes through.
    ``user``: remove them as this user, through a fresh process (an agent that is not
    root could not remove what the image's root left), not the agent's shell.
    """
    paths = " ".join(LEFTOVERS)
    checks = " && ".join(f"[ ! -e {p} ]" for p in LEFTOVERS)
    command = f"rm -rf {paths}; {checks}"
    try:
        if user is None:
            result = await session.exec(command, 30.0)
        else:
            result = await session.exec_fresh(command, 30.0, user=user)
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

    def __init__(
        self, manager: SandboxManager, *, lifetime_sec: Callable[[Task], float] | None = None
    ) -> None:
        self.manager = manager
        self.lifetime_sec = lifetime_sec
        self._builds: dict[str, asyncio.Future[None]] = {}

    def spec(self, task: Task, *, verifier: bool = False) -> SandboxSpec:
        """The task's sandbox: its environment and limits (never its tests or solution). ``verifier``: a separate
        verifier's sandbox, the same but with no agent user (its tests pick their own) and its own network."""
        overrides: dict[str, object] = {}
        if verifier:
            overrides["user"] = None
            if task.verifier_network is not None:
                overrides["network"] = "egress" if task.verifier_network == "public" else "none"
        if self.lifetime_sec is not None:
            overrides["lifetime_sec"] = self.lifetime_sec(task)
        return SandboxSpec.from_task(task, **overrides)

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
    async def open(self, task: Task, *, verifier: bool = False) -> AsyncIterator[Session]:
        """build(task), create a session, remove set-up leftovers and check they are gone (ResetFailed otherwise,
        TransientError passes through), yield it, close it. ``verifier``: the sandbox of a separate verifier."""
        # Judged on the machine that runs it (GPUs, platform), per task: not in build(), whose
        # error is shared by every task of the image.
        unmet = unmet_requirements(task)
        if unmet:
            raise EnvInitFailed(f"task {task.id} cannot run here: " + "; ".join(unmet))
        spec = self.spec(task, verifier=verifier)
        await self._build(spec)
        async with await self.manager.create(spec) as session:
            _OPENED[id(session)] = self  # how run_tests starts a separate verifier's sandbox
            try:
                await remove_leftovers(session, user="0" if spec.user else None)
                yield session
            finally:
                _OPENED.pop(id(session), None)
