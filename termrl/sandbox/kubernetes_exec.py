"""Exec streams of the kubernetes backend: a ``Channel`` over the client's websocket, exit statuses.

The API server's exec speaks the channel protocol (stdout 1, stderr 2, a ``Status`` on 3 when the
process ends); the official client's ``WSClient`` reads it. See ``termrl.sandbox.kubernetes``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from termrl.errors import SandboxDied
from termrl.sandbox.shell import Channel

__all__ = ["ExecChannel", "exit_status"]


def exit_status(ws: Any) -> int | None:
    """The exit status an ended exec stream reported on its error channel; None if it sent none
    (the stream was cut: the pod went, or the connection dropped). The client's own ``returncode``
    raises TypeError on an empty channel."""
    raw = ws.read_channel(3)
    if not raw:
        return None
    status = json.loads(raw)
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if c.get("reason") == "ExitCode"), None)
    if code is None:  # a failure that is not an exit status (the process could not start)
        raise SandboxDied(f"exec failed: {status.get('message', raw)}")
    return int(code)


class ExecChannel(Channel):
    """A ``Channel`` over a kubernetes ``WSClient`` exec stream (stdout and stderr merged).

    The stream is in binary mode: the API server frames output as it reads it, so a UTF-8 character
    may straddle two frames, which the client's text mode would decode apart (into U+FFFD).

    The client is synchronous: a reader thread pumps it into an asyncio queue.
    """

    def __init__(self, ws: Any, loop: asyncio.AbstractEventLoop):
        self.ws = ws
        self._loop = loop
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        from websocket import WebSocketException

        try:
            while not self._closed.is_set() and self.ws.is_open():
                self.ws.update(timeout=0.2)
                for read in (self.ws.read_stdout, self.ws.read_stderr):
                    data = read(timeout=0) if callable(read) else None
                    if data:
                        chunk = data.encode() if isinstance(data, str) else data
                        self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        except (OSError, WebSocketException):
            pass  # the socket closed under update() (close(), a dropped connection): the end, as EOF
        finally:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, b"")

    async def write(self, data: bytes) -> None:
        if not self.ws.is_open():
            raise SandboxDied("the exec stream is closed")
        await asyncio.to_thread(self.ws.write_stdin, data)

    async def read(self) -> bytes:
        chunk = await self._queue.get()
        if not chunk:
            self._queue.put_nowait(b"")  # stay at EOF for later readers
        return chunk

    async def close(self) -> None:
        # The pump first (it stops within one update() timeout): the client is not thread-safe, and
        # a socket closed under its update() raised in the pump thread.
        self._closed.set()
        await asyncio.to_thread(self._thread.join, 5)
        await asyncio.to_thread(self.ws.close)
