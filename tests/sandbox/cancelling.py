"""Cancel a fresh process's caller mid-run and count what it left running (the tests of each backend)."""

from __future__ import annotations

import asyncio

import pytest


async def left_after_cancelling(session, tag: int) -> int:
    """Start ``sleep <tag> & sleep <tag+1>; wait`` with ``exec_fresh``, cancel the call once both
    sleeps run, and return how many of them are still running. ``tag`` keeps tests apart."""
    call = asyncio.ensure_future(
        session.exec_fresh(f"sleep {tag} & sleep {tag + 1}; wait", timeout=600)
    )
    probe = f"pgrep -f '^sleep ({tag}|{tag + 1})$' | wc -l"
    for _ in range(600):
        if (await session.exec(probe)).output == "2\n":
            break
        await asyncio.sleep(0.1)
    else:
        call.cancel()
        raise AssertionError("the fresh process did not start")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    return int((await session.exec(probe)).output)
