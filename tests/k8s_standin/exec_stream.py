"""``pods/exec`` over a websocket, in the channel protocol the API server speaks (``v4``/``v5.channel.k8s.io``).

Every message is one frame whose first byte names the channel::

    0 stdin (client → server)   1 stdout   2 stderr   3 error: one ``Status`` JSON when the process ends
    4 resize (client → server, a terminal size: read and ignored, there is no tty here)
    255 close (v5 only, client → server): the next byte names a stream the client closes (0: stdin)

The server sends stdout and stderr as they come, then the status on channel 3, then closes the
websocket. The status is ``{"status": "Success"}`` or a ``NonZeroExitCode`` failure whose
``details.causes[0].message`` is the exit code, which is what the client's ``returncode`` parses.
A client that closes the websocket early leaves the process running, as on a node: only the
stream goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import WSMsgType, web

from tests.k8s_standin.runtime import CONMON_DIR

__all__ = ["PROTOCOLS", "serve_exec", "status_of_exit"]

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def status_of_exit(code: int, command: list[str]) -> dict[str, Any]:
    """The error channel's ``Status`` for a process that exited with ``code`` (as the kubelet words it)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


async def serve_exec(
    request: web.Request, argv: list[str], command: list[str], *, stdin: bool
) -> web.WebSocketResponse:
    """Upgrade ``request``, run ``argv`` (a ``podman exec``) and carry its streams until it ends."""
    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=0)
    await ws.prepare(request)
    if ws.ws_protocol not in PROTOCOLS:  # v1-v3 (no exit status on channel 3) are not modelled
        await ws.close(message=b"the stand-in speaks v4.channel.k8s.io and v5 only")
        return ws
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=CONMON_DIR,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    pumps = [
        asyncio.ensure_future(_pump_out(process.stdout, ws, STDOUT)),
        asyncio.ensure_future(_pump_out(process.stderr, ws, STDERR)),
    ]
    reader = asyncio.ensure_future(_pump_in(ws, process))
    output = asyncio.gather(*pumps)
    try:
        await asyncio.wait([reader, output], return_when=asyncio.FIRST_COMPLETED)
        if reader.done():  # the client went away: the stream ends, the process is left alone
            return ws
        code = await process.wait()
        with contextlib.suppress(ConnectionError):
            await ws.send_bytes(bytes([ERROR]) + json.dumps(status_of_exit(code, command)).encode())
            await ws.close()
    finally:
        reader.cancel()
        output.cancel()  # and retrieved below: a client gone first leaves it cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await output
        if process.returncode is None:
            process.kill()  # the podman exec client only: the process in the container lives on
            await process.wait()
    return ws


async def _pump_out(
    stream: asyncio.StreamReader | None, ws: web.WebSocketResponse, channel: int
) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        await ws.send_bytes(bytes([channel]) + chunk)


async def _pump_in(ws: web.WebSocketResponse, process: asyncio.subprocess.Process) -> None:
    """Client frames: stdin to the process, a v5 close of stdin as EOF, resizes dropped."""
    async for message in ws:
        if message.type == WSMsgType.BINARY:
            data = message.data
        elif message.type == WSMsgType.TEXT:  # the python client sends str data as text frames
            data = message.data.encode()
        else:
            break
        if not data:
            continue
        channel, payload = data[0], data[1:]
        if channel == STDIN and process.stdin is not None and payload:
            process.stdin.write(payload)
            with contextlib.suppress(ConnectionError):
                await process.stdin.drain()
        elif channel == CLOSE and payload[:1] == bytes([STDIN]) and process.stdin is not None:
            process.stdin.close()
