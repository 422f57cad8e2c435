"""Score a sandbox's state: run the task's tests out of the agent's reach and read the reward.

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

Where scoring's own set-up cannot run in the sandbox the agent left (step 3's
folders, the test kit's mount points: its bash, rm or mkdir deleted, a library
they load moved), the outcome is a failure with reward 0 and the reason in
``TestOutcome.unscorable``, not a ``RewardFailed``: a rollout masks those, and
a policy must not escape a failing score by breaking its sandbox
(``termrl.errors.SandboxUnscorable``). A ``/logs`` that is no longer a folder
is replaced, like the paths under it.

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
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import RewardFailed, SandboxUnscorable
from termrl.reward import VERIFIER_DIR, read_host_reward, read_sandbox_reward
from termrl.sandbox.session import relative_inside
from termrl.sandbox.spec import resolve_env
from termrl.tampering import find_tampering
from termrl.taskrun.outcome import TestOutcome, read_outcome
from termrl.taskrun.sandboxes import opened_by
from termrl.taskrun.session import DEFAULT_VERIFIER_TIMEOUT_SEC, TESTS_DIR, TaskSession
from termrl.tbcompat.testphase import prepare_test_phase, remove_mount_points
from termrl.verifierenv import collect_artifacts

__all__ = ["FRESH_TEST_DIRS", "pytest_addopts", "run_tests"]

log = logging.getLogger(__name__)

PYTEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
"""pytest's configuration files, in the order it prefers them within one directory."""

FRESH_TEST_DIRS = (
    f"rm -rf {TESTS_DIR} {VERIFIER_DIR} && {{ [ -d /logs ] && [ ! -L /logs ] || rm -f /logs; }}"
    f" && mkdir -p {TESTS_DIR} {VERIFIER_DIR}"
)
"""Whatever the agent left at the tests' and verifier's paths goes: a planted conftest.py, a reward
file, a symlink that would send the reward elsewhere, a file where the /logs folder was."""


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
        return await _score_or_fail(session, task, timeout, tampering)


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
    sandboxes = opened_by(session)
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
        return await _score_or_fail(fresh, task, timeout, ())


async def _score_or_fail(
    session: TaskSession, task: Task, timeout: float, tampering: tuple[str, ...]
) -> TestOutcome:
    """``_score``; a sandbox whose state stops scoring's own set-up is the agent's failure, reward 0."""
    started = time.monotonic()
    try:
        return await _score(session, task, timeout, tampering, started)
    except SandboxUnscorable as exc:
        reason = str(exc).partition("\n")[0]  # the message without the command's output
        log.warning("%s: scored a failure", reason)
        # What find_tampering saw goes into the output, not the tampering field: that field masks
        # a rollout episode (a pass may be forged), and this outcome is no pass.
        seen = "".join(f"\nchanged: {line}" for line in tampering)
        return TestOutcome(
            passed=False,
            reward=0.0,
            output=f"{exc}{seen}",
            duration=time.monotonic() - started,
            timed_out=False,
            unscorable=reason,
        )


async def _score(
    session: TaskSession,
    task: Task,
    timeout: float,
    tampering: tuple[str, ...],
    started: float,
) -> TestOutcome:
    """Steps 3 to 5 of the module docstring: fresh test directories, the tests, the reward."""
    prepare = await session.exec_fresh(FRESH_TEST_DIRS, timeout=30)
    if prepare.exit_code != 0:
        raise SandboxUnscorable(
            f"task {task.id}: cannot prepare {TESTS_DIR} and {VERIFIER_DIR} in the agent's sandbox",
            log_tail=prepare.output[-2000:],
        )
    env = {
        **resolve_env(task.env),
        **resolve_env(task.verifier_env),
        "TEST_DIR": TESTS_DIR,
        "PYTEST_ADDOPTS": pytest_addopts(task),
    }
    if session.private_binds:
        return await _score_in_private_mounts(session, task, timeout, tampering, env, started)
    return await _score_in_sandbox(session, task, timeout, tampering, env, started)


async def _score_in_private_mounts(
    session: TaskSession,
    task: Task,
    timeout: float,
    tampering: tuple[str, ...],
    env: dict[str, str],
    started: float,
) -> TestOutcome:
    """The tests and the verifier directory live on the host, mounted for the tests' process alone;
    the reward is read from the host's copy."""
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
                user=task.verifier_user,
            )
        finally:
            await remove_mount_points(session, phase)
        if result.exit_code in (125, 126) and result.output.startswith("termrl-enter:"):
            raise RewardFailed(  # e.g. a path of the tests' mounts behind a symbolic link
                f"task {task.id}: the tests could not be started: {result.output.strip()}",
                log_tail=result.output[-2000:],
            )
        read_reward = lambda code: asyncio.to_thread(read_host_reward, task.id, verifier, code)  # noqa: E731
        return await read_outcome(task, result, started, timeout, tampering, read_reward)


async def _score_in_sandbox(
    session: TaskSession,
    task: Task,
    timeout: float,
    tampering: tuple[str, ...],
    env: dict[str, str],
    started: float,
) -> TestOutcome:
    """Where the backend has no private mounts: the tests are uploaded into the sandbox and the
    reward is read there (with bash builtins only, ``read_sandbox_reward``)."""
    env = env | (await prepare_test_phase(session, task)).env
    await session.upload_files(task.test_files, TESTS_DIR)
    user = task.verifier_user
    if user is not None:  # the verifier's user writes the reward file
        await session.exec_fresh(f"chmod 0777 {VERIFIER_DIR}", timeout=30)
    result = await session.exec_fresh(
        task.test_command, timeout=timeout, env=env, workdir=session.workdir, user=user
    )
    read_reward = lambda code: read_sandbox_reward(session, task.id, code)  # noqa: E731
    return await read_outcome(task, result, started, timeout, tampering, read_reward)


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
