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
    CURRICULUM_CPU     ``termrl run``'s curriculum on a small CPU-only machine (SmolLM2-135M)
    NIGHTLY_EVAL       the scheduled nightly eval
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from termrl.settings import field_defaults

__all__ = [
    "CURRICULUM_CPU",
    "NIGHTLY_EVAL",
    "PRESETS",
    "REFERENCE_CLI",
    "ROLLOUT_EPISODES",
    "Preset",
]


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

CURRICULUM_CPU = Preset(
    "curriculum-cpu",
    "termrl run on a small CPU-only machine with SmolLM2-135M (pipelines/curriculum.py's "
    "docstring has the measurements): short episodes (3 turns of 128 tokens, eval too), no "
    "spare rollout group (each costs a group of CPU episodes), 16 groups because this "
    "policy's success on a task is close to all or nothing (with 8, no group had differing "
    "rewards), phase 1 at temperature 0.7 (16 % of unseen tasks solved vs 6 % at 1.0), full "
    "fine-tuning (LoRA is no faster on CPU), one verify run and no judges (the local judge "
    "is too weak to gate on), 8 eval sandboxes at once.",
    {
        "synthesize.count": 72,
        "synthesize.difficulties": ("easy",),
        "verify.repeats": 1,
        "verify.judges": (),
        "rollout.groups": 16,
        "rollout.redundancy": 0,
        "rollout.max_turns": 3,
        "rollout.max_new_tokens": 128,
        "rollout.temperature": 0.7,
        "rollout.anchoring": "parallel",
        "train.finetune": "full",
        "train.learning_rate": 1e-5,
        "imitation.learning_rate": 1e-4,
        "imitation.epochs": 3,
        "eval.max_turns": 3,
        "eval.max_new_tokens": 128,
        "eval.concurrency": 8,
    },
)

NIGHTLY_EVAL = Preset(
    "nightly-eval",
    "A nightly check of one policy on a fixed, small set of verified procedural tasks: "
    "12 tasks verified once without judges, episodes of 8 turns of 256 tokens (the rollout's "
    "limits), so it finishes overnight on a CPU node.",
    {
        "synthesize.count": 12,
        "verify.repeats": 1,
        "verify.judges": (),
        "eval.max_turns": 8,
        "eval.max_new_tokens": 256,
    },
)

PRESETS: dict[str, Preset] = {
    p.name: p for p in (ROLLOUT_EPISODES, REFERENCE_CLI, CURRICULUM_CPU, NIGHTLY_EVAL)
}


def unlisted_defaults(
    defaults: Mapping[str, Any],
    fields: Mapping[str, str],
    configs: Mapping[str, type],
    presets: tuple[Preset, ...] = (),
) -> list[str]:
    """The parameters in ``defaults`` (name -> default, a pipeline's) that restate a setting
    with another value than its stage config's default and than every preset given.

    ``fields``: parameter -> ``stage.field`` it sets (``"eval_max_turns": "eval.max_turns"``);
    ``configs``: stage -> its config class. None is unset, never a restatement. A string
    parameter for a tuple field is read comma-separated (a pipeline parameter cannot be a tuple).
    """
    problems = []
    for name, key in fields.items():
        value = defaults[name]
        if value is None:
            continue
        stage, _, field_name = key.partition(".")
        config_defaults = field_defaults(configs[stage])  # flat keys (sandbox_backend) included
        if field_name not in config_defaults:
            problems.append(f"{name}: {key} is no field of {configs[stage].__name__}")
            continue
        target = config_defaults[field_name]
        if isinstance(target, tuple) and isinstance(value, str):
            value = tuple(v for v in value.split(",") if v)
        allowed = [p.values[key] for p in presets if key in p.values]
        if value != target and value not in allowed:
            listed = f", nor a preset's ({allowed})" if allowed else ", and no preset lists it"
            problems.append(f"{name}={value!r}: {key} defaults to {target!r}{listed}")
    return problems
