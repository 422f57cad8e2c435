"""``ended_on_error``: a process whose waiting caller is cancelled or fails is ended and waited for."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from termrl.sandbox import procs
from termrl.sandbox.cli_calls import run_cli
from termrl.sandbox.reaping import ended_on_error


def _gone(pid: int) -> bool:
    """No such process, or only its exit status waiting for a parent (a killed orphan before init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def _ends(pid: int) -> bool:
    """Whether ``pid`` is gone within a generous while: a SIGKILL takes effect asynchronously."""
    for _ in range(3000):
        if _gone(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def _children_named(argument: str) -> list[int]:
    """Host pids below this process with ``argument`` on their command line, once there is one."""
    for _ in range(500):
        found = []
        for pid in procs.descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if argument.encode() in f.read().split(b"\0"):
                        found.append(pid)
            except OSError:
                continue
        if found:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"no process with {argument} started")


async def test_a_cancelled_caller_ends_and_reaps_its_process():
    process = await asyncio.create_subprocess_exec("sleep", "98761")

    async def wait() -> None:
        async with ended_on_error(process):
            await process.wait()

    waiter = asyncio.ensure_future(wait())
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert process.returncode == -signal.SIGKILL
    assert _gone(process.pid)


async def test_the_kill_given_ends_what_the_process_started_and_the_error_goes_on():
    process = await asyncio.create_subprocess_exec("sh", "-c", "sleep 98760 & wait")
    (sleeper,) = await _children_named("98760")
    with pytest.raises(RuntimeError, match="caller failed"):
        async with ended_on_error(process, lambda: procs.kill_tree(process.pid)):
            raise RuntimeError("caller failed")
    assert process.returncode == -signal.SIGKILL
    assert await _ends(sleeper)


async def test_a_process_that_ended_on_its_own_is_left_as_it_is():
    process = await asyncio.create_subprocess_exec("true")
    async with ended_on_error(process, lambda: pytest.fail("kill called")):
        await process.wait()
    assert process.returncode == 0


async def test_a_cli_call_whose_caller_is_cancelled_leaves_nothing_running():
    call = asyncio.ensure_future(run_cli(["sleep", "98759"], timeout=600))
    (sleeper,) = await _children_named("98759")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await _ends(sleeper)
