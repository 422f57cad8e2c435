"""One default per setting: a stage's config dataclass holds it, and nothing restates it.

Walks every field of every stage config: a KFP component parameter that sets a field must
default to None (unset), a stage command's option must default to None (the help shows the
config's default), and a pipeline parameter must either leave it unset, equal the config's
default, or be a value a named preset (``termrl.presets``) lists with its reason.
"""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest

from components.demonstrate.cli import demonstrate as demonstrate_cli
from components.demonstrate.component import demonstrate
from components.demonstrate.config import DemonstrateConfig
from components.eval.cli import eval_command
from components.eval.component import evaluate
from components.eval.config import EvalConfig
from components.health.cli import health as health_cli
from components.health.config import HealthConfig
from components.params import SANDBOX_PARAMETERS, UNDESCRIBED
from components.rollout.cli import rollout as rollout_cli
from components.rollout.component import rollout
from components.rollout.config import RolloutConfig
from components.synthesize.cli import synthesize as synthesize_cli
from components.synthesize.component import synthesize
from components.synthesize.config import SynthesizeConfig
from components.train.cli import train as train_cli
from components.train.component import train
from components.train.config import TrainConfig
from components.verify.cli import verify as verify_cli
from components.verify.component import verify
from components.verify.config import VerifyConfig
from pipelines.curriculum import build_curriculum
from pipelines.local import pipeline_defaults
from pipelines.nightly_eval import build_nightly_eval
from termrl.presets import CURRICULUM_CPU, NIGHTLY_EVAL, ROLLOUT_EPISODES, unlisted_defaults
from termrl.settings import field_defaults, field_types

STAGES = {
    "synthesize": (SynthesizeConfig, synthesize, synthesize_cli),
    "verify": (VerifyConfig, verify, verify_cli),
    "demonstrate": (DemonstrateConfig, demonstrate, demonstrate_cli),
    "rollout": (RolloutConfig, rollout, rollout_cli),
    "train": (TrainConfig, train, train_cli),
    "eval": (EvalConfig, evaluate, eval_command),
    "health": (HealthConfig, None, health_cli),
}
CONFIGS = {stage: config for stage, (config, _, _) in STAGES.items()} | {"imitation": TrainConfig}
SANDBOX_STAGES = ("demonstrate", "eval", "rollout", "verify")

CURRICULUM_FIELDS = {
    "synth_count": "synthesize.count",
    "synth_difficulties": "synthesize.difficulties",
    "verify_repeats": "verify.repeats",
    "verify_judges": "verify.judges",
    "prompt_style": "rollout.prompt_style",
    "imitation_epochs": "imitation.epochs",
    "imitation_learning_rate": "imitation.learning_rate",
    "il_weight": "train.il_weight",
    "il_decay": "train.il_decay",
    "rl_weight": "train.rl_weight",
    "anchoring": "rollout.anchoring",
    "group_size": "rollout.group_size",
    "groups": "rollout.groups",
    "dynamic_sampling": "rollout.dynamic_sampling",
    "rollout_concurrency": "rollout.concurrency",
    "max_turns": "rollout.max_turns",
    "max_new_tokens": "rollout.max_new_tokens",
    "rollout_temperature": "rollout.temperature",
    "phase2_temperature": "rollout.temperature",
    "finetune": "train.finetune",
    "learning_rate": "train.learning_rate",
    "train_epochs": "train.epochs",
    "eval_trials": "eval.trials",
    "eval_max_turns": "eval.max_turns",
    "eval_concurrency": "eval.concurrency",
    **{name: f"rollout.{name}" for name in SANDBOX_PARAMETERS},
}
"""The curriculum's parameters that set a stage config's field."""

NIGHTLY_FIELDS = {
    "task_count": "synthesize.count",
    "verify_repeats": "verify.repeats",
    "trials": "eval.trials",
    "max_turns": "eval.max_turns",
    "max_new_tokens": "eval.max_new_tokens",
    **{name: f"eval.{name}" for name in SANDBOX_PARAMETERS},
}


def _component_parameters(component: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(component.python_func).parameters)


@pytest.mark.parametrize("stage", [s for s, (_, c, _) in STAGES.items() if c is not None])
def test_component_parameters_leave_every_config_default_to_the_config(stage):
    config, component, _ = STAGES[stage]
    fields = field_types(config)
    restated = [
        f"{name}={p.default!r}"
        for name, p in _component_parameters(component).items()
        if name in fields and p.default not in (None, inspect.Parameter.empty)
    ]
    assert restated == [], f"{stage}'s component restates config defaults"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_command_options_leave_every_config_default_to_the_config(stage):
    config, _, command = STAGES[stage]
    fields = field_types(config)
    restated = [
        f"--{p.name}={p.default!r}"
        for p in command.params
        if isinstance(p, click.Option)
        and p.name in fields
        and not p.required  # a required option has no default
        and p.default not in (None, ())
    ]
    assert restated == [], f"{stage}'s command restates config defaults"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_the_help_shows_the_config_default(stage):
    config, _, command = STAGES[stage]
    defaults = field_defaults(config)
    options = [p for p in command.params if isinstance(p, click.Option) and p.name in defaults]
    for p in options:
        if not p.required and "Default:" in (p.help or ""):
            assert f"Default: {defaults[p.name]!r}" in p.help, p.name


@pytest.mark.parametrize("stage", SANDBOX_STAGES)
def test_every_sandbox_stage_shows_the_same_flat_sandbox_parameters(stage):
    _, component, command = STAGES[stage]
    names = [n for n in _component_parameters(component) if n.startswith("sandbox_")]
    assert tuple(names) == SANDBOX_PARAMETERS
    assert "backend" not in _component_parameters(component)
    assert "sandbox_backend" in {p.name for p in command.params}


@pytest.mark.parametrize("stage", [s for s, (_, c, _) in STAGES.items() if c is not None])
def test_every_component_parameter_is_described_for_the_kubeflow_ui(stage):
    _, component, _ = STAGES[stage]
    inputs = component.component_spec.inputs
    undescribed = [n for n, spec in inputs.items() if not spec.description and n not in UNDESCRIBED]
    assert undescribed == []
    doc = inspect.getdoc(component.python_func) or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    missing = [
        n for n in _component_parameters(component) if n not in UNDESCRIBED and f"{n}:" not in args
    ]
    assert missing == []


def test_pipeline_parameters_restate_no_default_but_a_presets():
    curriculum = pipeline_defaults(build_curriculum())
    assert unlisted_defaults(curriculum, CURRICULUM_FIELDS, CONFIGS, (CURRICULUM_CPU,)) == []
    nightly = pipeline_defaults(build_nightly_eval())
    assert unlisted_defaults(nightly, NIGHTLY_FIELDS, CONFIGS, (NIGHTLY_EVAL,)) == []


def test_a_restated_default_outside_the_presets_is_reported():
    defaults = {"groups": 16, "max_turns": None, "finetune": "lora", "judges": "", "x": 4}
    fields = {
        "groups": "rollout.groups",
        "max_turns": "rollout.max_turns",  # None: unset
        "finetune": "train.finetune",  # the config's own default
        "judges": "verify.judges",  # '' is no judges: the config's is (local,)
        "x": "rollout.no_such_field",
    }
    problems = unlisted_defaults(defaults, fields, CONFIGS)
    assert problems == [
        "groups=16: rollout.groups defaults to 4, and no preset lists it",
        "judges=(): verify.judges defaults to ('local',), and no preset lists it",
        "x: rollout.no_such_field is no field of RolloutConfig",
    ]
    listed = unlisted_defaults(defaults, {"groups": "rollout.groups"}, CONFIGS, (CURRICULUM_CPU,))
    assert listed == []


def test_rollout_and_eval_limits_differ_only_through_the_named_preset():
    from termrl.agent.loop import AgentConfig

    assert (EvalConfig.max_turns, EvalConfig.max_new_tokens) == (
        AgentConfig.max_turns,
        AgentConfig.max_new_tokens,
    )
    assert RolloutConfig().max_turns == ROLLOUT_EPISODES["rollout.max_turns"]
    assert RolloutConfig().max_turns != AgentConfig.max_turns
