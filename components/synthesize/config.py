"""The one configuration of the synthesize stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from components.synthesize.families import DIFFICULTIES, FAMILIES
from termrl.errors import ConfigError

__all__ = ["SynthesizeConfig"]


@dataclass
class SynthesizeConfig:
    """Every knob of ``python -m components.synthesize``, with its default and why."""

    out: str = "tasks.parquet"
    """Where the tasks artifact is written (atomically)."""

    count: int = 36
    """Procedural tasks to produce (after near-duplicates are removed). 36 = 12 families x 3 levels."""

    seed: int = 0
    """Master seed: the same seed and options give byte-identical tasks."""

    families: tuple[str, ...] = ()
    """Families to draw from; empty means all of ``families.FAMILIES``."""
    exclude_families: tuple[str, ...] = ()
    """Families never drawn (e.g. the curriculum's families held out of training)."""
    extra_families: tuple[str, ...] = ()
    """Families drawn apart from the others, with their own ``extra_count`` (none of them may be
    among the selected ``families``): the curriculum's held-out set gives the families it leaves
    out of training more tasks than an even spread over every family would, so that slice is
    large enough for an interval."""
    extra_count: int = 0
    """Tasks from ``extra_families`` (spread evenly over their family x difficulty cells, from a
    seed stream of their own), beside the ``count`` others; none when no extra family is named."""
    avoid: str = ""
    """A tasks artifact whose tasks this run never produces: a task with one of its ids, or an
    instruction near-duplicate of one of its instructions, is dropped (the curriculum's held-out
    synthesis avoids the training tasks, so no held-out task is ever trained on)."""

    difficulties: tuple[str, ...] = DIFFICULTIES
    """Difficulty levels to draw from; tasks are spread evenly over family x difficulty."""

    perturbation_rate: float = 0.3
    """Share of tasks whose environment is deliberately perturbed (the seed's environment augmentation)."""

    max_perturbations: int = 2
    """At most this many perturbations on one task."""

    dedup_threshold: float = 0.9
    """Instructions whose shingle Jaccard similarity reaches this are near-duplicates; the later one is dropped.

    0.9 is about "differs in one word" for a 60-word instruction; templated instructions that differ
    in their paths, names and numbers sit near 0.8 and are kept (their data differ too)."""

    shingle_size: int = 3
    """Words per shingle for near-duplicate detection."""

    max_attempts_factor: int = 5
    """Give up after count x this many generation attempts (when dedup keeps rejecting)."""

    llm_model: str | None = None
    """A litellm model name (e.g. ``openai/gpt-4o-mini``); when set, the model also writes tasks."""

    llm_count: int = 8
    """Tasks requested from ``llm_model`` (in addition to ``count``)."""

    llm_api_base: str | None = None
    """Base URL of an OpenAI-compatible server (a local vLLM, the tests' loopback server)."""

    llm_api_key: str | None = None
    """API key for ``llm_api_base``; None falls back to the provider's usual environment variable."""

    llm_temperature: float = 0.7
    """Sampling temperature: some spread, so repeated asks give different tasks."""

    llm_max_tokens: int = 4096
    """Reply length cap; a whole task (Dockerfile, solution, tests) fits in this."""

    llm_timeout_sec: float = 180.0
    """Per-request timeout; a request that times out counts as a rejection."""

    progress: bool = True
    """Show a tqdm progress bar (only runs with at least ``progress_min`` tasks get one)."""

    progress_min: int = 50
    """Runs smaller than this finish too fast for a progress bar to help."""

    extra_tags: list[str] = field(default_factory=list)
    """Tags added to every task of this run (e.g. a dataset name)."""

    def selected_families(self) -> list[str]:
        """The families this run draws from, in registry order."""
        return [
            f
            for f in FAMILIES
            if (not self.families or f in self.families) and f not in self.exclude_families
        ]

    def selected_extra_families(self) -> list[str]:
        """The families the extra tasks come from, in registry order (none without extra_count)."""
        return [f for f in FAMILIES if f in self.extra_families] if self.extra_count else []

    def validate(self) -> None:
        """Raise one ``ConfigError`` listing every problem."""
        problems = []
        if self.count < 0:
            problems.append(f"count must be >= 0, got {self.count}")
        named = set(self.families) | set(self.exclude_families) | set(self.extra_families)
        unknown = sorted(named - set(FAMILIES))
        if unknown:
            problems.append(f"unknown families {unknown}; known: {sorted(FAMILIES)}")
        bad_levels = sorted(set(self.difficulties) - set(DIFFICULTIES))
        if bad_levels:
            problems.append(f"unknown difficulties {bad_levels}; known: {list(DIFFICULTIES)}")
        twice = sorted(set(self.extra_families) & set(self.selected_families()))
        if twice and self.extra_count:
            problems.append(
                f"extra_families {twice} are also among the selected families: exclude them there"
            )
        if self.extra_count < 0:
            problems.append(f"extra_count must be >= 0, got {self.extra_count}")
        if not self.difficulties:
            problems.append("difficulties is empty")
        if not 0.0 <= self.perturbation_rate <= 1.0:
            problems.append(f"perturbation_rate must be in [0, 1], got {self.perturbation_rate}")
        if self.max_perturbations < 0:
            problems.append(f"max_perturbations must be >= 0, got {self.max_perturbations}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            problems.append(f"dedup_threshold must be in (0, 1], got {self.dedup_threshold}")
        if self.shingle_size < 1:
            problems.append(f"shingle_size must be >= 1, got {self.shingle_size}")
        if self.max_attempts_factor < 1:
            problems.append(f"max_attempts_factor must be >= 1, got {self.max_attempts_factor}")
        if self.llm_model is not None and self.llm_count < 1:
            problems.append(f"llm_count must be >= 1 when llm_model is set, got {self.llm_count}")
        if self.llm_timeout_sec <= 0:
            problems.append(f"llm_timeout_sec must be > 0, got {self.llm_timeout_sec}")
        if not self.out:
            problems.append("out (the tasks artifact path) is empty")
        if self.count == 0 and self.llm_model is None and not self.selected_extra_families():
            problems.append("nothing to do: count is 0, no extra tasks and no llm_model is set")
        if self.avoid and not Path(self.avoid).is_file():
            problems.append(f"avoid: no such tasks artifact {self.avoid!r}")
        if problems:
            raise ConfigError(problems)
