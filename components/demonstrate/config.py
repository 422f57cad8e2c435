"""The demonstrate stage's one configuration: every knob, its default and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from termrl.agent.loop import AgentConfig
from termrl.errors import ConfigError
from termrl.sandbox.settings import SandboxSettings

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
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """Sandbox backend and its options (``termrl.sandbox.settings``); flat, as ``sandbox_backend``,
    ``sandbox_namespace``, ... on the command line, in ``--set`` and in KFP parameters."""
    concurrency: int = 4
    """Replays (sandboxes) alive at once."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """The agent whose prompt, call format and observation rendering the demonstrations use:
    it must be the one rollout and eval run, so a demonstration is what that agent would have
    produced. ``max_turns`` is raised to fit the longest solution."""
    every_phrasing: bool = True
    """Write one demonstration per phrasing a task records (``metadata["phrasings"]``: the
    procedural families ask each task in three voices), each replayed in its own sandbox, so
    imitation learns the work, not one wording of it. False: the task's own instruction only."""
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
        problems: list[str] = self.sandbox.problems()
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
