"""Isolated terminal sessions for agents: podman (default), bubblewrap, Kubernetes.

    from termrl.sandbox import SandboxManager, SandboxSpec

    async with SandboxManager(backend="podman") as manager:
        async with await manager.create(SandboxSpec(image="termrl/base:bookworm")) as session:
            result = await session.exec("ls /app", timeout=30)

Modules: ``spec`` (what to start, what a command returns), ``manager`` (the
entry point), ``settings`` (the backend registry and a stage's typed choice of backend), ``backend`` (the abstract class every backend implements),
``session`` (one sandbox), ``shell`` (the persistent-shell protocol every
backend shares), ``fresh`` (processes outside the agent's shell, for
scoring), ``procs`` (a local sandbox's processes from the host: stopping the
agent's), ``podman``/``bwrap``/``kubernetes`` (backends; ``podman_sandbox`` and
``bwrap_sandbox`` their sessions), ``image_build`` (task environment images,
built with podman), ``cli_calls`` (one engine CLI call, bounded in time),
``docker_defaults`` (Docker's capabilities and masked /proc paths, which bwrap
and Kubernetes copy), ``enter`` (bwrap's
``exec`` helper), ``seccomp`` (bwrap's filter), ``rootfs`` (files inside a
sandbox root, from the host),
``base_images`` (local Debian base images), ``hostca`` (CA injection),
``metrics`` (Prometheus), ``commands`` (`termrl sandbox ...`).
"""

from termrl.sandbox.backend import Backend
from termrl.sandbox.base_images import BASE_IMAGES, BaseImage, build_base_images
from termrl.sandbox.manager import BACKENDS, SandboxManager
from termrl.sandbox.session import Session, State
from termrl.sandbox.settings import KubernetesOptions, SandboxSettings
from termrl.sandbox.spec import ExecResult, SandboxSpec

__all__ = [
    "BACKENDS",
    "BASE_IMAGES",
    "Backend",
    "BaseImage",
    "ExecResult",
    "KubernetesOptions",
    "SandboxManager",
    "SandboxSettings",
    "SandboxSpec",
    "Session",
    "State",
    "build_base_images",
]
