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
