"""A command's timeout stops that command, whatever signals it ignores, and nothing else.

The command's processes get SIGINT, then SIGKILL, within about a second; the
shell (its variables) and the background jobs of earlier commands survive.
Only a shell stuck in itself (a builtin loop, a ``wait`` on jobs) is killed and
restarted, and the command that timed out says so in its own output. Each
backend runs the same shell protocol: podman and bwrap here, Kubernetes through
its exec channel and kill helper over local processes (no cluster runs here).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import pytest

from termrl.sandbox import SandboxSpec
from termrl.sandbox.kubernetes import ExecChannel, KubernetesSandbox
from termrl.sandbox.shell import RESTART_NOTICE, SUPERVISOR, Shell
from tests.sandbox.test_kubernetes import PipeWS

TIMEOUT = 2.0
SLACK = 3.0
"""The issue's bound: a timed-out command returns within its timeout and this much."""

IGNORES_SIGINT = {
    "trap": "trap '' INT; sleep 100",
    "child bash": "bash -c \"trap '' INT; sleep 100\"",
    "python": (
        "python3 -c 'import time\nwhile True:\n  try: time.sleep(100)\n"
        "  except KeyboardInterrupt: pass'"
    ),
    "trap INT TERM": "trap '' INT TERM; sleep 100",
}
STUCK_SHELL = {
    "builtin loop": "while :; do :; done",
    # The job is an earlier command's (the timeout leaves it alone) and ignores SIGINT as all
    # background jobs of a non-interactive shell do: the shell itself is what is stuck.
    "wait": "wait",
}
PID_FILE = f"/tmp/termrl-bg-{uuid.uuid4().hex[:8]}.pid"  # the Kubernetes stand-in runs on the host
BEFORE = f"cd /tmp && X=kept; sleep 300 & echo $! > {PID_FILE}"
# A killed job may stay a zombie a while (of an init that reaps late): that is not alive.
AFTER = (
    f"echo ${{X:-lost}}; p=/proc/$(cat {PID_FILE}); "
    "{ [ -e $p ] && ! grep -qs zombie $p/status; } && echo bg-alive || echo bg-gone"
)


async def _timed(run, command: str) -> tuple[str, bool, float]:
    started = time.monotonic()
    output, timed_out = await run(command)
    return output, timed_out, time.monotonic() - started


async def _commands_that_ignore_sigint_are_stopped_and_the_shell_survives(run) -> None:
    assert "shell exited" not in (await run(BEFORE))[0]
    for name, command in IGNORES_SIGINT.items():
        output, timed_out, took = await _timed(run, command)
        assert timed_out and took < TIMEOUT + SLACK, (name, took, output)
        assert "shell exited" not in output, (name, output)
        assert (await run(AFTER))[0] == "kept\nbg-alive\n", name


async def _a_stuck_shell_is_restarted_and_says_so_at_once(run) -> None:
    for name, command in STUCK_SHELL.items():
        await run(BEFORE)
        output, timed_out, took = await _timed(run, command)
        assert timed_out and output.endswith(RESTART_NOTICE.format(cwd="/tmp")), (name, output)
        # Found stuck, not waited out: the fixed wait was 10 s after SIGKILL.
        assert took < TIMEOUT + 7, (name, took)
        assert (await run(AFTER))[0] == "lost\nbg-gone\n", name


def _session_runner(session):
    async def run(command: str) -> tuple[str, bool]:
        result = await session.exec(command, timeout=TIMEOUT)
        return result.output, result.timed_out

    return run


@pytest.mark.podman
async def test_commands_that_ignore_sigint_time_out_and_keep_the_shell(local, base_images):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await _commands_that_ignore_sigint_are_stopped_and_the_shell_survives(
            _session_runner(session)
        )


@pytest.mark.podman
async def test_a_stuck_shell_is_restarted_with_the_notice_in_that_commands_output(
    local, base_images
):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await _a_stuck_shell_is_restarted_and_says_so_at_once(_session_runner(session))


@pytest.fixture
async def pod_shell():
    """The Kubernetes backend's shell: its exec channel and ``KubernetesSandbox.signal`` (the kill
    helper through a second exec), each exec stream a local process instead of one in a pod."""
    pod = KubernetesSandbox(api=None, namespace="unused", name="local")
    pod._stream = lambda command, **_: PipeWS(command)  # type: ignore[method-assign]
    token = Shell.new_token()
    ws = PipeWS(["bash", "-c", SUPERVISOR, "supervisor", token])
    channel = ExecChannel(ws, asyncio.get_running_loop())
    shell = Shell(channel, token, pod.signal, output_limit=8192)
    try:
        await shell.start("/tmp")
        yield shell
    finally:
        await channel.close()


def _shell_runner(shell: Shell):
    async def run(command: str) -> tuple[str, bool]:
        output, _, timed_out, _ = await shell.exec(command, TIMEOUT)
        return output, timed_out

    return run


async def test_kubernetes_commands_that_ignore_sigint_time_out_and_keep_the_shell(pod_shell):
    await _commands_that_ignore_sigint_are_stopped_and_the_shell_survives(_shell_runner(pod_shell))


async def test_kubernetes_a_stuck_shell_is_restarted_with_the_notice(pod_shell):
    await _a_stuck_shell_is_restarted_and_says_so_at_once(_shell_runner(pod_shell))


@pytest.mark.podman
async def test_a_timeout_keeps_background_jobs_when_the_caller_ignores_sigint(local, base_images):
    """A caller started as a background job of a script (or under nohup) ignores SIGINT, and its
    children inherit that: the sandbox shell must not, or no timeout's SIGINT would reach anything."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        session = await local.create(SandboxSpec(image=base_images))
    finally:
        signal.signal(signal.SIGINT, previous)
    async with session:
        await session.exec("cd /tmp && export N=41; sleep 300 & echo $! > bg.pid")
        timed = await session.exec("sleep 100", timeout=0.5)
        assert timed.timed_out and timed.exit_code is None
        after = await session.exec("echo $((N + 1)); kill -0 $(cat bg.pid) && echo bg")
        assert after.output == "42\nbg\n"  # the same shell (N kept), the background job alive


@pytest.mark.podman
async def test_a_shell_that_makes_no_progress_after_its_command_died_is_not_killed(
    local, base_images
):
    """What a loaded machine does: the command is killed, and the shell, due to reap it and report,
    is not scheduled for seconds. It must not be killed meanwhile (its variables and jobs would be
    lost): nothing it does says it is stuck. An earlier job stands in for the scheduler here,
    stopping the shell during the command and resuming it 4 s later."""
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec(
            "export N=41; shell=$$; rm -f /tmp/go; (while [ ! -e /tmp/go ]; do sleep 0.05; done; "
            "kill -STOP $shell; sleep 4; kill -CONT $shell) >/dev/null 2>&1 &"
        )
        timed = await session.exec("touch /tmp/go; sleep 100", timeout=0.5)
        assert timed.timed_out and "shell exited" not in timed.output, timed.output
        after = await session.exec("echo $((N + 1))")
        assert after.output == "42\n" and after.exit_code == 0, after.output
