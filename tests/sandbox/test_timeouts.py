"""A command's timeout interrupts the command alone, whatever signals the caller ignores.

A caller started as a background job of a script (or under nohup) ignores SIGINT, and its
children inherit that; a sandbox shell that ignored SIGINT would let every timeout escalate to
killing the shell with the agent's background jobs.
"""

from __future__ import annotations

import signal

import pytest

from termrl.sandbox import SandboxSpec

pytestmark = pytest.mark.podman


async def test_a_timeout_keeps_background_jobs_when_the_caller_ignores_sigint(local, base_images):
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


async def test_a_shell_slow_to_answer_after_its_command_died_is_not_killed(local, base_images):
    """On a loaded machine the shell can take seconds to report a command that the timeout's signals
    ended; it must not be killed meanwhile (its variables and jobs would be lost, and the next
    command would get the restart notice). Here the shell itself works on for ~2 s after the child
    dies, as a slow one would; only a shell stuck far longer is killed."""
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("export N=41")
        slow = "sleep 100 || { end=$((SECONDS + 3)); while [ $SECONDS -lt $end ]; do :; done; }"
        timed = await session.exec(slow, timeout=0.5)
        assert timed.timed_out and "shell exited" not in timed.output, timed.output
        after = await session.exec("echo $((N + 1))")
        assert after.output == "42\n" and after.exit_code == 0, after.output
