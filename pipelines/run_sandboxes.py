"""What a local run does for its stages' sandboxes: reaps a crashed run's, and takes its own along.

``reap_dead_owners_sandboxes``: before a run starts, podman sandboxes whose owner died (a
stage of an earlier run, killed) are removed, whatever their age.

``stages_stop_with_the_run``: ``termrl run`` stopped by SIGTERM or SIGINT stops the stage
that runs now, and so its sandboxes. kfp's local runner waits for each stage, a subprocess of ``termrl run`` in its process
group. Ctrl-C in a terminal reaches the whole group; a SIGTERM or SIGINT sent to
``termrl run`` alone (a scheduler, ``kill``, a closed session manager) would leave the
stage running on its own, its sandboxes with it, until it finished. Here the signal is
passed on as SIGTERM to every process below the run, which ends a stage at once (its
sandboxes go with it: ``termrl.sandbox.warden``), and the run stops with the usual
exception: ``KeyboardInterrupt`` for SIGINT, ``SystemExit(128 + signal)`` for SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from types import FrameType

from termrl.sandbox.procs import descendants

__all__ = ["reap_dead_owners_sandboxes", "stages_stop_with_the_run"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def reap_dead_owners_sandboxes(binary: str = "podman") -> None:
    """Remove the sandboxes of owners that died (``PodmanBackend.cleanup(None)``); none without podman."""
    if shutil.which(binary) is None:
        return
    from termrl.sandbox.podman import PodmanBackend

    asyncio.run(PodmanBackend(binary).reap_dead_owners())


@contextlib.contextmanager
def stages_stop_with_the_run() -> Iterator[None]:
    """While inside, SIGTERM/SIGINT end the processes below this one, then this one."""

    def stop(signum: int, frame: FrameType | None) -> None:
        for child in descendants(os.getpid()):  # kfp runs a stage as sh -c around Python
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
