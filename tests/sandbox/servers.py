"""Servers on the host that a sandbox must, or must not, reach (network isolation tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator

__all__ = ["host_address", "serving"]


def host_address() -> str | None:
    """A global IPv4 address of this host (what a sandbox with egress reaches as a peer)."""
    shown = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True
    )
    for link in json.loads(shown.stdout or "[]"):
        for addr in link.get("addr_info", []):
            return addr["local"]
    return None


@contextlib.asynccontextmanager
async def serving(host: str, tag: str, hits: list[str]) -> AsyncIterator[int]:
    """An HTTP server on ``host`` answering ``reached-<tag>`` (each request appends ``tag`` to ``hits``); its port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(tag)
        await reader.readuntil(
            b"\r\n\r\n"
        )  # closing with the request unread would reset the connection
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nreached-" + tag.encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
