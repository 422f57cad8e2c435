"""One default per setting: a stage's config dataclass holds it, and nothing restates it.

Walks every field of every stage config: a KFP component parameter that sets a field must
default to None (unset), a stage command's option must default to None (the help shows the
config's default). Pipeline parameters are checked the same way against their pipeline's
named preset in ``tests/pipelines/test_parameter_defaults.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
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
from termrl.agent.loop import AgentConfig
from termrl.llm.engine import SamplingParams
from termrl.presets import ROLLOUT_EPISODES
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


def test_rollout_and_eval_limits_differ_only_through_the_named_preset():
    assert (EvalConfig.max_turns, EvalConfig.max_new_tokens) == (
        AgentConfig.max_turns,
        AgentConfig.max_new_tokens,
    )
    assert RolloutConfig().max_turns == ROLLOUT_EPISODES["rollout.max_turns"]
    assert RolloutConfig().max_turns != AgentConfig.max_turns


PASSED_ON = {
    AgentConfig: (SamplingParams,),
    DemonstrateConfig: (AgentConfig, SamplingParams),
    RolloutConfig: (AgentConfig, SamplingParams),
    EvalConfig: (AgentConfig, SamplingParams),
}
"""A config -> the configs it hands settings on to (the agent's, the engine's sampling)."""


def _literal_defaults(config: type) -> dict[str, Any]:
    """The fields whose default ``config``'s class body writes as a literal (``= 512``), not
    taken from elsewhere (``= SamplingParams.max_new_tokens``)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(config))).body[0].body
    return {
        node.target.id: node.value.value
        for node in body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(node.value, ast.Constant)
    }


@pytest.mark.parametrize("config", PASSED_ON, ids=lambda c: c.__name__)
def test_a_setting_handed_on_takes_its_default_from_the_config_it_reaches(config):
    # The same value written twice is two defaults: change one and the other silently stays.
    # A different value is the config's own choice (eval samples greedily) and a None is unset.
    restated = [
        f"{config.__name__}.{name} = {value!r} restates {target.__name__}.{name}"
        for target in PASSED_ON[config]
        for name, value in _literal_defaults(config).items()
        for f in dataclasses.fields(target)
        if f.name == name and value is not None and f.default == value
    ]
    assert restated == []
