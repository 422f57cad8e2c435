"""What the agent needs from a sandbox: one awaitable ``exec``.

The agent is typed against this Protocol, not against a backend, so the
podman/bubblewrap/Kubernetes sessions of ``termrl.sandbox`` and a scripted
in-process session (unit tests) are interchangeable.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["ExecOutcome", "ExecSession"]


@runtime_checkable
class ExecOutcome(Protocol):
    """The result of one command (``termrl.sandbox.ExecResult`` has these fields)."""

    output: str
    exit_code: int | None
    duration: float
    timed_out: bool
    truncated: bool


@runtime_checkable
class ExecSession(Protocol):
    """A persistent shell: cwd, environment and background jobs survive between calls."""

    async def exec(self, cmd: str, timeout: float | None = None) -> ExecOutcome: ...
