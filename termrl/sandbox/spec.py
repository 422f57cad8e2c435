"""What a sandbox is made from (``SandboxSpec``) and what one command returns (``ExecResult``).

A spec names either a ready image or a task environment (a Dockerfile and its
build context as ``TaskFile``s). Environment images are cached by content hash:
``environment_hash`` is the key, so two tasks with byte-identical environments
share one image build. A task's recorded base-image stand-ins
(``termrl.tbcompat``) rewrite its Dockerfile's FROM names in the files handed
to the builder (``build_files``), never in the task itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from termrl.artifacts.tasks import TaskFile
from termrl.errors import ConfigError, EnvInitFailed
from termrl.sandbox.dockerfile import rewrite_from

if TYPE_CHECKING:
    from termrl.artifacts.tasks import Task

__all__ = ["ExecResult", "Network", "SandboxSpec", "environment_hash", "resolve_env"]

_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")

Network = Literal["none", "egress"]


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command in a session's shell.

    ``exit_code`` is None when the command timed out (``timed_out``) and was
    interrupted; ``output`` is stdout and stderr interleaved, capped to the
    manager's limit with the middle replaced by a marker line (``truncated``).
    """

    output: str
    exit_code: int | None
    duration: float
    timed_out: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def environment_hash(files: list[TaskFile]) -> str:
    """A content hash of a build context: paths, bytes and modes, order-independent."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        digest.update(f"{f.path}\0{f.mode & 0o7777:o}\0{len(f.data)}\0".encode())
        digest.update(f.data)
    return digest.hexdigest()


def resolve_env(env: Mapping[str, str], host: Mapping[str, str] | None = None) -> dict[str, str]:
    """A task's ``env`` with Harbor's templates resolved from the host's environment.

    A value that is exactly ``${VAR}`` or ``${VAR:-default}`` takes the host's
    ``VAR`` (else the default); any other value is literal. A template with no
    default whose variable the host lacks is an ``EnvInitFailed`` naming it
    (Harbor refuses such a task the same way).
    """
    host = os.environ if host is None else host
    resolved: dict[str, str] = {}
    missing = []
    for key, value in env.items():
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            resolved[key] = value
        elif match.group(1) in host:
            resolved[key] = host[match.group(1)]
        elif match.group(2) is not None:
            resolved[key] = match.group(2)
        else:
            missing.append(f"{key} = {value}")
    if missing:
        raise EnvInitFailed(
            f"task environment variables need host variables that are not set: {', '.join(missing)}"
        )
    return resolved


def _rewritten(dockerfile: bytes, rewrites: dict[str, str]) -> bytes:
    text = dockerfile.decode(errors="surrogateescape")
    return rewrite_from(text, rewrites).encode(errors="surrogateescape")


@dataclass
class SandboxSpec:
    """Everything needed to start one sandbox.

    Exactly one of ``image`` and ``environment_files`` is set: an image
    reference, or a Dockerfile plus build context to build (and cache) first.
    """

    image: str | None = None
    environment_files: list[TaskFile] = field(default_factory=list)
    workdir: str | None = None
    """Start directory of the shell and of fresh processes; None keeps the image's WORKDIR."""
    user: str | None = None
    """The user (name or uid) the agent's shell runs as; None: the image's USER. Fresh processes run as
    the image's USER unless they name another (``Session.exec_fresh``)."""
    env: dict[str, str] = field(default_factory=dict)
    network: Network = "none"
    """"none": no network at all; "egress": outbound access, host CAs injected."""
    cpus: float = 1.0
    memory_mb: int = 2048
    pids: int = 512
    """Most processes and threads alive at once; a fork bomb stops here."""
    storage_mb: int = 10240
    """Most the sandbox may write to its filesystem (bwrap and rootful podman: a sized upper layer; writes
    past it fail with ENOSPC in that sandbox alone; kubernetes: an ephemeral-storage limit, past which the kubelet evicts the pod). 0: no limit."""
    lifetime_sec: float = 3600.0
    """The sandbox is destroyed this long after it started, whatever it is doing."""
    build_timeout_sec: float = 600.0
    labels: dict[str, str] = field(default_factory=dict)
    base_image_rewrites: dict[str, str] = field(default_factory=dict)
    """FROM name -> local stand-in, applied to the Dockerfile at build time."""
    build_installers: dict[str, dict[str, object]] = field(default_factory=dict)
    """Installer URL -> the tool it installs: served from local copies during the build
    (``termrl.tbcompat.installers`` records them, ``termrl.sandbox.build_tools`` serves them)."""

    def __post_init__(self) -> None:
        problems = []
        if (self.image is None) == (not self.environment_files):
            problems.append("set exactly one of image and environment_files")
        if self.environment_files and not any(
            f.path == "Dockerfile" for f in self.environment_files
        ):
            problems.append("environment_files has no Dockerfile")
        if self.network not in ("none", "egress"):
            problems.append(f"network must be 'none' or 'egress', not {self.network!r}")
        for name, value in (
            ("cpus", self.cpus),
            ("memory_mb", self.memory_mb),
            ("pids", self.pids),
            ("lifetime_sec", self.lifetime_sec),
            ("build_timeout_sec", self.build_timeout_sec),
        ):
            if value <= 0:
                problems.append(f"{name} must be positive, not {value}")
        if self.storage_mb < 0:
            problems.append(f"storage_mb must be >= 0 (0: no limit), not {self.storage_mb}")
        if problems:
            raise ConfigError(problems)

    @property
    def image_key(self) -> str:
        """A stable name for the image this spec runs (built or given)."""
        if self.image is not None:
            return self.image
        digest = environment_hash(self.build_files())
        if self.build_installers:  # what the local installers put in the image is part of it
            record = json.dumps(self.build_installers, sort_keys=True)
            digest = hashlib.sha256(f"{digest}\0{record}".encode()).hexdigest()
        return f"termrl/env:{digest[:24]}"

    def build_files(self) -> list[TaskFile]:
        """The build context as the builder gets it: the Dockerfile's FROM names rewritten."""
        if not self.base_image_rewrites:
            return list(self.environment_files)
        return [
            TaskFile(f.path, _rewritten(f.data, self.base_image_rewrites), f.mode)
            if f.path == "Dockerfile"
            else f
            for f in self.environment_files
        ]

    @classmethod
    def from_task(cls, task: Task, **overrides: object) -> SandboxSpec:
        """The spec of ``task``'s environment with its resource limits.

        Only the environment goes in: test and solution files are never part
        of the image, so the agent cannot read them before scoring.
        """
        rewrites = {ref: e["image"] for ref, e in task.adaptations.get("base_images", {}).items()}
        values: dict[str, object] = {
            # A prebuilt image runs as it is (through its stand-in, as a FROM line would); else build the Dockerfile.
            "image": rewrites.get(task.docker_image, task.docker_image)
            if task.docker_image
            else None,
            "environment_files": [] if task.docker_image else list(task.environment_files),
            "workdir": task.workdir,
            "env": resolve_env(task.env),
            "user": task.agent_user,
            "network": "egress" if task.allow_internet else "none",
            "labels": {"termrl.task": task.id},
            "base_image_rewrites": rewrites,
            "build_installers": {
                url: {"tool": e["tool"], "version": e.get("version")}
                for url, e in task.adaptations.get("build_installers", {}).items()
            },
        }
        for name, value in (
            ("cpus", task.cpus),
            ("memory_mb", task.memory_mb),
            ("storage_mb", task.storage_mb),
            ("build_timeout_sec", task.build_timeout_sec),
        ):
            if value is not None:
                values[name] = value
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
