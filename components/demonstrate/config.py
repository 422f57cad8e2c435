"""The demonstrate stage's one configuration: every knob, its default and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from termrl.agent.loop import AgentConfig
from termrl.errors import ConfigError

__all__ = ["DemonstrateConfig"]


@dataclass
class DemonstrateConfig:
    """Everything the demonstrate stage needs."""

    tasks: Path = Path("admitted.parquet")
    """Tasks artifact whose solutions become demonstrations (normally the train pool)."""
    out: Path = Path("demonstrations.parquet")
    """Trajectories artifact to write (``source = expert``, every chunk ``replayed``)."""
    model: str | None = None
    """The policy whose tokenizer and chat template the demonstrations are written in;
    None is the embedded default (SmolLM2). Only the tokenizer is loaded."""
    backend: str = "podman"
    """Sandbox backend (``termrl.sandbox.SandboxManager``)."""
    sandbox_namespace: str = ""
    """Kubernetes backend: namespace of the sandbox pods ('' = ``termrl-sandboxes``)."""
    sandbox_registry: str = ""
    """Kubernetes backend: registry of the task environment images (``REG/termrl/env:<hash>``,
    pushed by ``termrl images push-tasks``)."""
    sandbox_pull_secret: str = ""
    """Kubernetes backend: image pull secret of the sandbox pods ('' = none)."""
    concurrency: int = 4
    """Replays (sandboxes) alive at once."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """The agent whose prompt, call format and observation rendering the demonstrations use:
    it must be the one rollout and eval run, so a demonstration is what that agent would have
    produced. ``max_turns`` is raised to fit the longest solution."""
    progress: bool = True
    parts: Path | None = None
    """The resume folder; None: beside ``out`` (``out`` + ``.parts``). The component puts it where
    a retried pod finds it (``components.progress``)."""

    @property
    def parts_dir(self) -> Path:
        """One file per finished task (a demonstration or the reason there is none): the resume state."""
        return (
            Path(self.parts)
            if self.parts is not None
            else self.out.with_name(self.out.name + ".parts")
        )

    def validate(self) -> None:
        problems: list[str] = []
        if self.concurrency < 1:
            problems.append(f"concurrency must be at least 1, not {self.concurrency}")
        if self.out.suffix != ".parquet":
            problems.append(f"out must be a .parquet file, not {str(self.out)!r}")
        if not self.tasks.is_file():
            problems.append(f"tasks artifact {str(self.tasks)!r} does not exist")
        try:
            self.agent.validate()
        except ConfigError as exc:
            problems.extend(exc.problems)
        if problems:
            raise ConfigError(problems)
