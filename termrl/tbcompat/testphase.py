"""Putting the offline test kit and the exit-grace hooks into a sandbox right before its tests run.

``termrl.taskrun.run_tests`` calls ``prepare_test_phase`` after preparing the
tests and before running them; it returns the environment the test command
runs with and, where the tests get private mounts, the kit's. A task that
records no ``test_kit`` adaptation gets nothing. The kit is fetched on the host
(cached; see ``termrl.tbcompat.kit``) — never from inside the sandbox, which
has no network.

With private mounts the kit never enters the sandbox's filesystem, where a
service the agent left running could swap uv or the ``env`` file the test
script sources: only empty mount points are made there, and
``remove_mount_points`` takes away those that did not exist before. What the
tests install is kept out of that reach the same way: uv's cache
(``SANDBOX_UV_CACHE_DIR``, where ``uvx`` keeps the tools it runs) and, when
the working directory has no ``.venv`` yet, the virtualenv the test script
makes there (Terminal-Bench 1.0's ``uv init; uv add pytest; uv run pytest``)
are empty host folders mounted for the tests alone, so a service cannot put a
pytest plugin into them while the tests install and run. A ``.venv`` that is
already there (the image's, or one the agent made) is the task's state and is
used as it is; a pytest plugin the agent put into it is flagged
(``termrl.tampering``). Without private mounts the cache is emptied before the
tests start.

A test that leaves a thread running keeps pytest's process alive after it
has finished and printed its summary, and so the test script, until the
verifier's timeout. Every task's tests get ``pyhooks/`` on their PYTHONPATH
(before the task's or the image's own): in a pytest process, its
sitecustomize loads a plugin that, ``EXIT_GRACE_SEC`` after pytest has
finished, ends the process with pytest's own exit status. A child process
the tests leave holding the output does not hold the caller either
(``termrl.sandbox.fresh``). ``TERMRL_EXIT_GRACE_SEC=wait`` keeps Harbor's
wait-for-all.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import ConfigError, SandboxUnscorable
from termrl.sandbox.spec import resolve_env
from termrl.tbcompat.kit import (
    SANDBOX_UV_CACHE_DIR,
    KitSpec,
    ensure_kit,
    kit_binds,
    kit_files,
    test_env,
)

__all__ = [
    "EXIT_GRACE_SEC",
    "SANDBOX_HOOKS_DIR",
    "TestPhase",
    "exit_grace_sec",
    "prepare_test_phase",
    "remove_mount_points",
]

log = logging.getLogger("termrl.tbcompat")

EXIT_GRACE_SEC = 30.0
"""How long a pytest run that has finished may go on before it is ended with its own exit status
(a thread its tests left running keeps Python alive; Harbor waits for the verifier's timeout).
``TERMRL_EXIT_GRACE_SEC`` overrides it; ``wait`` keeps Harbor's behaviour."""
SANDBOX_HOOKS_DIR = "/opt/termrl-pyhooks"
"""Where the exit-grace hooks (``pyhooks/``: a sitecustomize and a pytest plugin) are, on the tests'
PYTHONPATH."""
_HOOKS = Path(__file__).parent / "pyhooks"


class _Result(Protocol):
    output: str
    exit_code: int | None


class _Session(Protocol):
    workdir: str

    async def exec_fresh(self, command: str, timeout: float = ...) -> _Result: ...
    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None: ...


@dataclass
class TestPhase:
    """What the test command gets beyond the tests: environment, and the kit's private mounts."""

    __test__ = False  # not a pytest test class

    env: dict[str, str] = field(default_factory=dict)
    binds: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Sandbox path → (host path, read-only), for the tests' process alone."""
    made: list[str] = field(default_factory=list)
    """Mount points made for ``binds`` that did not exist before (``remove_mount_points``)."""


def _mount_points_script(dirs: list[str], files: list[str]) -> str:
    """Each target in place as an empty folder or file of its own, not a link (a mount would follow
    it): whatever else is there is replaced; what is made here is printed, to be removed after."""
    lines = [
        f'p={shlex.quote(d)}; {{ [ -d "$p" ] && [ ! -L "$p" ]; }} || '
        '{ rm -rf -- "$p"; mkdir -p -- "$p" && echo "$p"; } || exit 1'
        for d in dirs
    ]
    lines += [
        f'p={shlex.quote(f)}; mkdir -p -- "$(dirname -- "$p")" && {{ [ -f "$p" ] && [ ! -L "$p" ]; }} || '
        '{ rm -rf -- "$p"; : > "$p" && echo "$p"; } || exit 1'
        for f in files
    ]
    return "\n".join(lines)


def exit_grace_sec() -> float | None:
    """Seconds a finished pytest run may go on before it is ended (None: wait for it, as Harbor).

    ``TERMRL_EXIT_GRACE_SEC`` on the host: a number of seconds, or ``wait`` (or 0) for
    Harbor's behaviour, which waits for every thread until the verifier's timeout.
    """
    raw = os.environ.get("TERMRL_EXIT_GRACE_SEC", "").strip().lower()
    if not raw:
        return EXIT_GRACE_SEC
    if raw == "wait":
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(
            f"TERMRL_EXIT_GRACE_SEC must be a number of seconds or 'wait', got {raw!r}"
        ) from exc
    return value if value > 0 else None


def _hook_files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(_HOOKS.glob("*.py"))}


def _python_path(task: Task, image_path: str) -> str:
    """PYTHONPATH for the tests: the hooks first, then the task's own (or else the image's)."""
    own = {**resolve_env(task.env), **resolve_env(task.verifier_env)}.get("PYTHONPATH", image_path)
    return f"{SANDBOX_HOOKS_DIR}:{own}" if own else SANDBOX_HOOKS_DIR


async def prepare_test_phase(
    session: _Session, task: Task, private_dir: Path | None = None
) -> TestPhase:
    """Put ``task``'s offline test kit and the exit-grace hooks in place for its tests.

    ``private_dir``: a host folder of this scoring's own, given where the backend
    mounts host paths for the tests alone; the kit is then written there and
    returned as mounts. Without it, the kit is uploaded into the sandbox.
    """
    record = task.adaptations.get("test_kit")
    grace = exit_grace_sec()
    if not record and grace is None:
        return TestPhase()
    # What a fresh process of the tests sees: its home (uv goes where astral's installer would
    # put it; the agent's shell may have changed HOME), the image's PYTHONPATH, and whether the
    # working directory has a .venv yet (a private one only where none is there and no link
    # leads to it: a private mount's path must have none, or the tests would not start).
    probe = await session.exec_fresh(
        'printf "%s\\n" "$HOME" "${PYTHONPATH-}"; [ -e .venv ] || [ -L .venv ] '
        '|| [ "$(pwd -P)" != "$PWD" ] || echo no-venv',
        timeout=30,
    )
    home, image_path, *rest = [*probe.output.splitlines(), "", ""]
    home_dir = home if probe.exit_code == 0 and home.startswith("/") else "/root"
    phase = TestPhase()
    if record:
        await _kit_phase(session, task, private_dir, phase, home_dir, "no-venv" in rest)
    if grace is not None:
        hooks = _hook_files()
        phase.env |= {
            "TERMRL_EXIT_GRACE_SEC": f"{grace:g}",
            "PYTHONPATH": _python_path(task, image_path if probe.exit_code == 0 else ""),
        }
        if private_dir is None:
            await session.upload_files(
                [
                    TaskFile(f"{SANDBOX_HOOKS_DIR.lstrip('/')}/{name}", data, 0o644)
                    for name, data in hooks.items()
                ],
                "/",
            )
        else:
            folder = private_dir / "pyhooks"
            folder.mkdir(mode=0o755)
            for name, data in hooks.items():
                (folder / name).write_bytes(data)
                (folder / name).chmod(0o644)
            phase.binds[SANDBOX_HOOKS_DIR] = (str(folder), True)
    if phase.binds:
        dirs = [path for path, (host, _) in phase.binds.items() if Path(host).is_dir()]
        files = [path for path in phase.binds if path not in dirs]
        made = await session.exec_fresh(_mount_points_script(dirs, files), timeout=30)
        if made.exit_code != 0:
            raise SandboxUnscorable(
                f"task {task.id}: cannot make the test kit's mount points",
                log_tail=made.output[-2000:],
            )
        phase.made = made.output.splitlines()
    return phase


async def _kit_phase(
    session: _Session,
    task: Task,
    private_dir: Path | None,
    phase: TestPhase,
    home_dir: str,
    no_venv: bool,
) -> None:
    """The offline test kit into ``phase``: uploaded, or as private mounts under ``private_dir``."""
    spec = KitSpec.from_json(task.adaptations["test_kit"])
    kit_dir = await asyncio.to_thread(ensure_kit, spec, log.info)
    phase.env |= test_env(spec)
    if private_dir is None:
        files = await asyncio.to_thread(kit_files, spec, kit_dir, home_dir)
        await session.upload_files(files, "/")
        cache = shlex.quote(SANDBOX_UV_CACHE_DIR)
        emptied = await session.exec_fresh(f"rm -rf -- {cache} && mkdir -m 777 {cache}", timeout=60)
        if emptied.exit_code != 0:
            raise SandboxUnscorable(
                f"task {task.id}: cannot empty uv's cache for the tests",
                log_tail=emptied.output[-2000:],
            )
        return
    phase.binds |= await asyncio.to_thread(kit_binds, spec, kit_dir, home_dir, private_dir)
    scratch = {SANDBOX_UV_CACHE_DIR: private_dir / "uv-cache"}
    if no_venv:
        scratch[f"{session.workdir.rstrip('/')}/.venv"] = private_dir / "venv"
    for path, folder in scratch.items():
        folder.mkdir()
        folder.chmod(0o777)  # whatever user the tests run as writes there
        phase.binds[path] = (str(folder), False)


async def remove_mount_points(session: _Session, phase: TestPhase) -> None:
    """Take away the mount points ``prepare_test_phase`` made (files, then empty folders)."""
    if phase.made:
        paths = " ".join(shlex.quote(p) for p in phase.made)
        await session.exec_fresh(
            f"rm -f -- {paths} 2>/dev/null; rmdir -- {paths} 2>/dev/null; :", timeout=30
        )
