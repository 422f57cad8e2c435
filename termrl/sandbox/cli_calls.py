"""One call of a container engine's CLI (podman, docker) as a child process, bounded in time.

    code, out = await run_cli([binary, "image", "exists", ref], timeout=60)
    code, out, over = await read_capped([binary, "cp", f"{name}:{path}", "-"], limit)

Both return status 124 when the call ran past its timeout (it is killed), and
end the process when the caller is cancelled (``reaping.ended_on_error``).
"""

from __future__ import annotations

import asyncio

from termrl.sandbox.reaping import ended_on_error

__all__ = ["read_capped", "run_cli"]


async def run_cli(
    argv: list[str], stdin: bytes | None = None, timeout: float = 120
) -> tuple[int, bytes]:
    """Run a CLI call; (exit status, stdout+stderr). Status 124 on timeout."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with ended_on_error(process):
        try:
            out, _ = await asyncio.wait_for(process.communicate(stdin), timeout)
        except TimeoutError:
            process.kill()
            out, _ = await process.communicate()
            return 124, out or b""
    return process.returncode or 0, out


async def read_capped(argv: list[str], limit: int, timeout: float = 120) -> tuple[int, bytes, bool]:
    """Run a CLI call reading at most ``limit`` bytes of its stdout; (status, stdout+stderr, over the limit)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout = process.stdout
    if stdout is None:
        raise ValueError("no stdout pipe")
    out = bytearray()

    async def read() -> bool:
        while chunk := await stdout.read(65536):
            out.extend(chunk)
            if len(out) > limit:
                return True
        return False

    async with ended_on_error(process):
        try:
            over = await asyncio.wait_for(read(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            return 124, bytes(out), False
        if over:
            process.kill()
        await process.wait()
    return process.returncode or 0, bytes(out), over
