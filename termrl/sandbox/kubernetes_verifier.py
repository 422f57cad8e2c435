"""The verifier container of a kubernetes sandbox pod: scoring from beside the agent, out of its reach.

A sandbox pod runs two containers that share one process namespace (``shareProcessNamespace``):

    sandbox    the agent's: the task image, Docker's capabilities less NET_RAW
    verifier   idle (``sleep infinity``) until scoring; a trusted image (the stage's own, or the
               task image as built), root with the capabilities to enter another container
               (SYS_ADMIN, SYS_PTRACE, SYS_CHROOT, ...), no seccomp or AppArmor confinement

Everything scoring needs done to the agent is done from the verifier, with the verifier's own
``bash`` and ``python3`` (nothing from the agent's filesystem runs there), through the scripts of
``termrl.sandbox.kubernetes_verifier_scripts``:

    at start   find the agent container's init (``AGENT_INIT``) and record its files (path, inode,
               ctime, size) and its environment (``BASELINE``), before the agent acts
    stop       ``STOP_HELPER`` (SIGSTOP all but services), signals (``KILL_HELPER``)
    freeze     ``enter.py``'s freeze mode in the agent's mount namespace (``FREEZE_HOLDER``)
    tests      ``enter.py`` with private binds: the host's directories are staged into the
               verifier's own filesystem, cloned onto the tests' paths in a mount namespace of the
               tests' own; what they write comes back to the host afterwards
    tampering  the agent's files against the baseline (``changed_files``): ctimes only the kernel
               sets, compared by a process the agent cannot reach

Why the agent cannot touch it: the verifier's processes hold capabilities the agent's lack, so the
kernel refuses the agent ptrace and ``/proc/<pid>/{root,fd,mem,environ}`` of them (the capability
subset rule of ``ptrace_may_access``); the two share no writable path. The agent can still signal
them (it is root with CAP_KILL in a shared pid namespace): that stops scoring, which then fails
(``SandboxDied``/``RewardFailed``), never passes.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
import platform
import shutil
import tarfile
import tempfile
import uuid
from typing import Any

from termrl.errors import SandboxDied
from termrl.sandbox import seccomp
from termrl.sandbox.fresh import (
    FREEZE_SEC,
    SYSTEM_PATHS,
    UNPIN_SEC,
    UnknownUser,
    fresh_argv,
    fresh_env,
    user_ids,
)
from termrl.sandbox.kubernetes_verifier_scripts import (
    AGENT_INIT,
    BASELINE,
    BASELINE_FILE,
    ENTER_SOURCE,
    FREEZE_HOLDER,
    KILL_TREE,
    PACK,
    STOP_PRELUDE,
    UNPACK,
    python_argv,
)
from termrl.sandbox.procs import SERVICE_GRACE_SEC
from termrl.sandbox.shell import KILL_HELPER
from termrl.sandbox.stop_helper import STOP_HELPER

__all__ = ["VERIFIER", "VERIFIER_CAPS", "VerifierScoring", "verifier_container"]

VERIFIER = "verifier"
VERIFIER_CAPS = (
    "SYS_ADMIN",  # setns into the agent's mount namespace, mounts (private binds, the freeze)
    "SYS_PTRACE",  # /proc/<pid>/{ns,root,fd} of the agent's processes, whatever their user
    "SYS_CHROOT",
    "SETUID",
    "SETGID",
    "SETPCAP",  # enter.py cuts the tests' bounding set
    "KILL",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "AUDIT_WRITE",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
)
"""The verifier's capabilities: a superset of the agent's (so the agent cannot ptrace it) plus what
entering the agent's container takes."""


def verifier_container(image: str, cpu: str, memory: str) -> dict[str, Any]:
    """The verifier's container: idle, root, the capabilities to enter the agent's container.

    Its requests are small (it idles while the agent works); its limits are the sandbox's, since
    the tests run in its cgroup (a container cannot join another's)."""
    return {
        "name": VERIFIER,
        "image": image,
        "command": ["sleep", "infinity"],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": cpu, "memory": memory},
        },
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "privileged": False,
            "capabilities": {"drop": ["ALL"], "add": list(VERIFIER_CAPS)},
            # setns, mount and the new mount API (open_tree, move_mount, mount_setattr) are outside
            # the runtimes' default profiles, and AppArmor's default profile denies mount.
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
        },
        "stdin": False,
        "tty": False,
    }


def enter_config(
    target: int,
    *,
    seccomp: bytes,
    machine: str,
    env: dict[str, str],
    argv: list[str],
    binds: list[tuple[str, str, bool]],
    user: dict[str, object] | None,
    unfreeze: tuple[str, ...],
) -> str:
    """``enter.py``'s configuration for a process in the agent's container (no cgroups to join: a
    container cannot join another's, so the tests run in the verifier's)."""
    return json.dumps(
        {
            "target": target,
            "cgroups": [],
            "seccomp": seccomp.hex(),
            "machine": machine,
            "env": env,
            "argv": argv,
            "binds": [list(b) for b in binds],
            "user": user,
            "unfreeze": list(unfreeze) if binds else [],
        }
    )


class VerifierScoring:
    """What a kubernetes sandbox does through its verifier container (the module docstring).

    Mixed into ``KubernetesSandbox``, whose ``_exec_argv`` (a command's status and output),
    ``_run_with_stdin`` and ``_run_fresh`` run commands in a named container of the pod."""

    name: str
    private_binds = True
    _agent: int | None = None
    _holder: Any = None
    _frozen_names: tuple[str, ...] = ()
    _env: dict[str, str] | None = None

    def _exec_argv(self, argv: list[str], container: str) -> tuple[int, str]:
        raise NotImplementedError

    async def _run_with_stdin(
        self, argv: list[str], container: str, data: bytes
    ) -> tuple[int, str]:
        raise NotImplementedError

    async def _run_fresh(
        self, argv: list[str], container: str, timeout: float, output_limit: int, kill: Any
    ) -> tuple[str, int | None, bool, bool]:
        raise NotImplementedError

    async def _plain_fresh(self, command: str, **kwargs: Any) -> tuple[str, int | None, bool, bool]:
        raise NotImplementedError

    async def _verifier(self, argv: list[str]) -> str:
        """Run ``argv`` in the verifier; its output, ``SandboxDied`` if it failed (the agent may
        have killed the verifier: scoring then fails, never passes)."""
        code, out = await asyncio.to_thread(self._exec_argv, argv, VERIFIER)
        if code != 0:
            raise SandboxDied(f"the verifier of pod {self.name} failed ({code}): {out[-500:]}")
        return out

    async def record_baseline(self) -> None:
        """Find the agent's init and record its files and environment (before the agent acts)."""
        out = (await self._verifier(["bash", "-c", AGENT_INIT])).strip()
        if not out.isdigit():
            raise SandboxDied(f"pod {self.name}: the verifier finds no agent container: {out!r}")
        self._agent = int(out)
        await self._verifier(python_argv(BASELINE, "record", out, BASELINE_FILE))

    def _target(self) -> int:
        if self._agent is None:
            raise SandboxDied(f"pod {self.name}: no baseline was recorded")
        return self._agent

    async def enter_target(self) -> int | None:
        return self._agent

    async def signal(self, pid: int, sig: str, mode: str) -> str:
        argv = ["bash", "-c", KILL_HELPER, "termrl", sig, str(pid), mode]
        return (await asyncio.to_thread(self._exec_argv, argv, VERIFIER))[1]

    async def stop_agent_processes(self, shell_pid: int | None) -> list[str]:
        settled = [] if shell_pid is None else [str(shell_pid)]
        grace = str(math.ceil(SERVICE_GRACE_SEC))
        argv = ["bash", "-c", STOP_PRELUDE, "termrl", str(self._target()), STOP_HELPER, grace]
        return (await self._verifier([*argv, *settled])).split()

    async def resume_agent_processes(self, stopped: object) -> None:
        if stopped:
            await self._verifier(["bash", "-c", STOP_HELPER, "termrl", "cont", *stopped])  # type: ignore[misc]

    async def changed_files(self) -> dict[str, str] | None:
        out = await self._verifier(
            python_argv(BASELINE, "diff", str(self._target()), BASELINE_FILE)
        )
        return json.loads(out)

    async def freeze_system_paths(self) -> None:
        if self._holder is not None:
            return
        config = json.dumps({"target": self._target(), "freeze": list(SYSTEM_PATHS)})
        holder = await self._open_holder(python_argv(FREEZE_HOLDER, ENTER_SOURCE, config))
        line = b""
        try:
            while b"\n" not in line:
                chunk = await asyncio.wait_for(holder.read(), FREEZE_SEC)
                if not chunk:
                    break
                line += chunk
            names = json.loads(line.partition(b"\n")[0])
        except (TimeoutError, ValueError) as exc:
            await holder.close()
            raise OSError(
                f"cannot freeze the system folders of pod {self.name}: {line[-500:]!r}"
            ) from exc
        self._holder, self._frozen_names = holder, tuple(names)

    async def _open_holder(self, argv: list[str]) -> Any:
        raise NotImplementedError

    async def thaw_system_paths(self) -> None:
        holder, self._holder, self._frozen_names = self._holder, None, ()
        if holder is None:
            return
        try:
            await holder.write(b"thaw\n")
            seen = b""
            while b"thawed" not in seen:
                chunk = await asyncio.wait_for(holder.read(), FREEZE_SEC)
                if not chunk:
                    break
                seen += chunk
        except (TimeoutError, SandboxDied):
            pass  # the helper is gone: its mounts went with the stream's end, or stay frozen
        finally:
            await holder.close()

    async def _agent_env(self) -> dict[str, str]:
        """The agent container's configured environment, as its init had it at start."""
        if self._env is None:
            self._env = json.loads(
                await self._verifier(python_argv(BASELINE, "env", "0", BASELINE_FILE))
            )
        return self._env

    async def exec_entered(
        self,
        command: str,
        *,
        env: dict[str, str] | None,
        workdir: str,
        timeout: float,
        output_limit: int,
        binds: dict[str, tuple[str, bool]],
        user: str | None,
    ) -> tuple[str, int | None, bool, bool]:
        """``exec_fresh`` with private binds: the verifier runs ``enter.py`` into the agent's
        container, the binds staged in the verifier's own filesystem and copied back after."""
        try:
            ids = None if user is None else await user_ids(self._plain_fresh, user)
        except UnknownUser as exc:
            return str(exc), 126, False, False
        staging = f"/var/tmp/termrl-binds-{uuid.uuid4().hex[:12]}"
        code, out = await self._stage(binds, staging)
        if code != 0 or "unpacked" not in out:
            raise SandboxDied(f"pod {self.name}: cannot stage the tests' folders: {out[-500:]}")
        try:
            config = enter_config(
                self._target(),
                seccomp=seccomp.program(),
                machine=platform.machine(),
                env=fresh_env(await self._agent_env(), env),
                argv=fresh_argv(command, workdir),
                binds=[
                    (f"{staging}/{i}", path, ro) for i, (path, (_, ro)) in enumerate(binds.items())
                ],
                user=ids,
                unfreeze=self._frozen_names,
            )

            async def kill(pid: int) -> None:
                await self._verifier(python_argv(KILL_TREE, str(pid), str(UNPIN_SEC)))

            result = await self._run_fresh(
                python_argv(ENTER_SOURCE, config), VERIFIER, timeout, output_limit, kill
            )
            for i, (host, readonly) in enumerate(binds.values()):
                if not readonly and os.path.isdir(host):
                    await self._fetch(f"{staging}/{i}", host)
        finally:
            await self._verifier(["rm", "-rf", "--", staging])
        return result

    async def _stage(self, binds: dict[str, tuple[str, bool]], staging: str) -> tuple[int, str]:
        """Copy each bind's host file or folder into the verifier, as ``staging/<index>``."""

        def pack() -> bytes:
            with tempfile.TemporaryFile() as spool:
                with tarfile.open(fileobj=spool, mode="w") as tar:
                    for i, (host, _) in enumerate(binds.values()):
                        tar.add(host, arcname=str(i))
                spool.seek(0)
                return spool.read()

        archive = await asyncio.to_thread(pack)
        return await self._run_with_stdin(
            python_argv(UNPACK, str(len(archive)), staging), VERIFIER, archive
        )

    async def _fetch(self, folder: str, host: str) -> None:
        """What the tests left in the verifier's ``folder`` into the host folder ``host``."""
        archive = base64.b64decode(await self._verifier(python_argv(PACK, folder)))
        await asyncio.to_thread(unpack_left_behind, archive, host)


def unpack_left_behind(archive: bytes, host: str) -> None:
    """``PACK``'s archive into the host folder ``host``, as the tests left it: folders, regular
    files, FIFOs and symbolic links made as such (a link is never followed, whatever it names), and
    nothing outside ``host`` or below a link. What ``host`` held before goes (the tests saw it
    staged, and may have removed it)."""
    top = os.path.realpath(host)
    for entry in os.scandir(top):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            target = os.path.normpath(os.path.join(top, member.name))
            parent = os.path.dirname(target)
            if not target.startswith(top + os.sep) or os.path.realpath(parent) != parent:
                raise OSError(f"the tests' folder holds a path outside it: {member.name!r}")
            mode = member.mode & 0o777
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                os.chmod(target, mode)
            elif member.isfile():
                source = tar.extractfile(member)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                with os.fdopen(os.open(target, flags, mode), "wb") as out:
                    out.write(source.read() if source is not None else b"")
                os.chmod(target, mode)
            elif member.issym():
                os.symlink(member.linkname, target)
            elif member.isfifo():
                os.mkfifo(target, mode)
