"""``Backend``: where sandboxes run — what the manager asks of podman, bwrap and Kubernetes.

    manager ─► backend.build_image(spec) -> image ref   (built once and cached, or given)
            ─► backend.start(spec, image, output_limit) -> (Sandbox, Shell)
            ─► Session(sandbox, shell, ...)              (what callers get)

A backend raises ``EnvInitFailed`` when an image does not build or a sandbox
does not start, and ``SandboxUnavailable`` when the backend itself cannot be
used; the manager counts both and passes them on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from termrl.sandbox.session import Sandbox
    from termrl.sandbox.shell import Shell
    from termrl.sandbox.spec import SandboxSpec

__all__ = ["Backend"]


class Backend(ABC):
    """One kind of sandbox: builds the images it runs and starts sandboxes from them."""

    name: str
    """The backend's label in metrics and on sessions ("podman", "docker", "bwrap", "kubernetes")."""

    @abstractmethod
    async def build_image(self, spec: SandboxSpec) -> str:
        """The image ``spec`` runs: its ``image``, or its environment built (and cached); a reference."""

    @abstractmethod
    async def start(
        self, spec: SandboxSpec, image: str, output_limit: int
    ) -> tuple[Sandbox, Shell]:
        """Start a sandbox of ``image`` with ``spec``'s limits; its shell is ready, output capped to
        ``output_limit`` bytes per command."""
