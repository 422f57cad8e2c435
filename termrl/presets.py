"""Named presets: the contexts that deliberately set a knob away from its stage's default.

A stage's config dataclass (``components/<stage>/config.py``) is the one place a default
lives; KFP components and stage commands pass "unset" through to it. A context that must
differ takes a preset from here, by name, with the reason it differs, instead of stating
another default. ``tests/test_defaults.py`` fails on any restated default that is not
one of these.

Keys are ``stage.field`` (the ``termrl run --set stage.FIELD=VALUE`` names; ``imitation``
is the curriculum's imitation train step) or, for the reference agent CLI, its options.

    ROLLOUT_EPISODES   rollout's episode limits (shorter than the agent's own, which eval runs)
    REFERENCE_CLI      the stand-alone agent CLI's limits when it is run by hand

A pipeline's own presets (the CPU curriculum, the nightly eval) are in ``pipelines.presets``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["REFERENCE_CLI", "ROLLOUT_EPISODES", "Preset"]


@dataclass(frozen=True)
class Preset:
    """Values a context sets on purpose, and why."""

    name: str
    reason: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def stage(self, stage: str) -> dict[str, Any]:
        """This preset's values for ``stage``'s config, by field name."""
        prefix = f"{stage}."
        return {k.removeprefix(prefix): v for k, v in self.values.items() if k.startswith(prefix)}


ROLLOUT_EPISODES = Preset(
    "rollout-episodes",
    "An RL rollout samples groups × group_size episodes every iteration and trains on every "
    "token of them: 8 turns of at most 256 tokens in a 4096-token window keep a batch within "
    "one engine's reach and a train step's memory. Eval runs the agent's own, longer limits "
    "(AgentConfig: 30 turns of 512 tokens), so a policy is measured on the tasks as given.",
    {"rollout.max_turns": 8, "rollout.max_new_tokens": 256, "rollout.context_window": 4096},
)

REFERENCE_CLI = Preset(
    "reference-cli",
    "The reference agent CLI run by hand (python -m termrl.agent.reference_cli): a short "
    "loop for trying an endpoint. A cli-native rollout always passes its own limits.",
    {"max_turns": 10, "max_tokens": 256, "temperature": 1.0},
)
