"""Ending a host process when the coroutine that waits on it is interrupted.

asyncio ends nothing by itself. A caller that is cancelled (a sibling in its
TaskGroup failed, an outer ``wait_for`` ran out, ``asyncio.run`` shut down)
leaves the process it was waiting on running, with its pipes' transport open
until the garbage collector finds it. By then the event loop may be closed,
and closing the transport fails ("Event loop is closed"). On CPython 3.11, a
finalizer that runs in the middle of ``ast.parse`` fails the parse as well
(gh-106905).

    process = await asyncio.create_subprocess_exec(...)
    async with ended_on_error(process, kill):   # kill: how to end it and what it started
        out = await ...                          # read and wait as usual
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

__all__ = ["ended_on_error"]


@contextlib.asynccontextmanager
async def ended_on_error(
    process: asyncio.subprocess.Process, kill: Callable[[], None] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Yield ``process``; if the body raises (cancellation included), end it with ``kill``
    (default: SIGKILL to the process alone) and wait for it to exit before the exception goes on."""
    try:
        yield process
    except BaseException:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                (kill or process.kill)()
        # Shielded: a second cancellation (asyncio.run's shutdown cancels every task) must not
        # leave the process unwaited; the exception that brought us here goes on either way.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(process.wait())
        raise
