"""SIGTERM closes the sandboxes of a process before it ends (a stage pod deleted or retried).

The kubelet stops a stage's pod with SIGTERM and kills it with SIGKILL after its grace period
(30 s by default). Python's default for SIGTERM ends the process at once, leaving every sandbox
it started running until its lifetime ends. ``watch(manager)`` (called by ``SandboxManager`` when
it starts its first sandbox) installs one handler per event loop: on SIGTERM it closes every
watched manager's sessions (at most ``CLOSE_TIMEOUT_SEC``), then restores the handler that was
there before and raises SIGTERM again, so the process ends as it would have.

Only a loop in the main thread can receive signals; managers in other threads' loops are
closed by the main loop's handler only if it watches them too (it does not): a stage that runs
its sandboxes in worker threads has them collected by ``termrl sandbox gc``.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import weakref
from typing import Any

__all__ = ["CLOSE_TIMEOUT_SEC", "watch"]

CLOSE_TIMEOUT_SEC = 20.0
"""Within the kubelet's default 30 s grace period."""

_closing: set[asyncio.Task[None]] = set()  # the running close, held until it ends
_watched: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[Any]] = (
    weakref.WeakKeyDictionary()
)


def watch(manager: Any) -> None:
    """Close ``manager``'s sessions if this process gets SIGTERM (main-thread loops only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    if loop in _watched:
        _watched[loop].add(manager)
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, _on_sigterm, loop, previous)
    except (NotImplementedError, RuntimeError, ValueError):
        return  # a loop without signal support
    _watched[loop] = weakref.WeakSet([manager])


def _on_sigterm(loop: asyncio.AbstractEventLoop, previous: Any) -> None:
    managers = list(_watched.pop(loop, ()))
    loop.remove_signal_handler(signal.SIGTERM)
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    async def close_then_terminate() -> None:
        try:
            closing = [manager.close() for manager in managers]
            await asyncio.wait_for(
                asyncio.gather(*closing, return_exceptions=True), CLOSE_TIMEOUT_SEC
            )
        finally:
            signal.raise_signal(signal.SIGTERM)

    task = loop.create_task(close_then_terminate())
    _closing.add(task)
    task.add_done_callback(_closing.discard)
