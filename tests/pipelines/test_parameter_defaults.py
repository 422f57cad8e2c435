"""A pipeline parameter states no default of its own for a stage setting, except in its named preset.

The links are read from the compiled pipeline, not from the parameters' declarations:
every stage task's component input bound to a pipeline parameter sets the stage config
field of that name (``demonstrate``'s ``prompt_style`` is its agent's), so a parameter
added with a literal default, or wired to another stage, is caught as well.
"""

import dataclasses
from dataclasses import dataclass

import pytest
from kfp import dsl

from pipelines.curriculum import build_curriculum
from pipelines.curriculum_params import CurriculumParams
from pipelines.local import pipeline_defaults
from pipelines.nightly_eval import NightlyParams, build_nightly_eval
from pipelines.parameters import (
    CONFIGS,
    own,
    pipeline_function,
    stage,
    stage_default,
    stage_links,
)
from pipelines.presets import CPU_CURRICULUM, NIGHTLY_EVAL, Chosen, Preset
from pipelines.shape import CurriculumShape, make_ops
from pipelines.spec_tasks import leaf_tasks
from termrl.errors import ConfigError

COMPONENT_STAGES = {
    "synthesize": "synthesize",
    "verify": "verify",
    "demonstrate": "demonstrate",
    "rollout": "rollout",
    "train": "train",
    "evaluate": "eval",
}
"""Components that run a stage -> the stage whose config their parameters set."""
NOT_FIELDS = {"code_version", "options"}
RENAMED = {("demonstrate", "prompt_style"): "agent.prompt_style"}


def _component(leaf_name: str) -> str:
    base = leaf_name.rsplit("-", 1)[0] if leaf_name.rsplit("-", 1)[-1].isdigit() else leaf_name
    return base.replace("-", "_")


def compiled_links(pipeline) -> dict[str, set[str]]:
    """Pipeline parameter -> the ``STAGE.FIELD`` settings it reaches in the compiled spec."""
    links: dict[str, set[str]] = {}
    for name, leaf in leaf_tasks(pipeline.pipeline_spec).items():
        stage_name = COMPONENT_STAGES.get(_component(name))
        if stage_name is None:
            continue  # glue (prepare-model, curate, health, compare): no stage config
        for key, value in leaf.task.inputs.parameters.items():
            parameter = value.component_input_parameter.removeprefix("pipelinechannel--")
            # kfp adds the accelerator's channels as inputs of their own, named pipelinechannel--*
            if parameter and key not in NOT_FIELDS and not key.startswith("pipelinechannel--"):
                field = RENAMED.get((stage_name, key), key)
                links.setdefault(parameter, set()).add(f"{stage_name}.{field}")
    return links


def undeclared_differences(pipeline, preset: Preset) -> list[str]:
    """Every parameter whose default differs from a stage field it sets without the preset naming
    it, and every preset value that equals such a default (no deliberate difference at all)."""
    defaults = pipeline_defaults(pipeline)
    problems = []
    for parameter, links in sorted(compiled_links(pipeline).items()):
        value = defaults[parameter]
        for link in sorted(links):
            expected = stage_default(link, type(value))
            if parameter in preset.values and value == expected:
                problems.append(f"{parameter}: preset {preset.name} restates {link}'s default")
            elif parameter not in preset.values and value != expected:
                problems.append(
                    f"{parameter} = {value!r} sets {link} (default {expected!r}) and is not in "
                    f"preset {preset.name}"
                )
    return problems


PIPELINES = [
    (build_curriculum, CurriculumParams, CPU_CURRICULUM),
    (build_nightly_eval, NightlyParams, NIGHTLY_EVAL),
]


@pytest.mark.parametrize("build, params, preset", PIPELINES)
def test_defaults_are_the_stage_configs_or_the_named_preset(build, params, preset):
    pipeline = build()
    assert undeclared_differences(pipeline, preset) == []
    defaults = pipeline_defaults(pipeline)
    for name, chosen in preset.values.items():
        assert defaults[name] == chosen.value, name  # the UI shows the preset's value
        assert len(chosen.why.split()) >= 5, f"{name}: give the reason for the value"


@pytest.mark.parametrize("build, params, preset", PIPELINES)
def test_declared_links_are_the_compiled_wiring(build, params, preset):
    """The Argo nightly and the defaults follow the declarations: they must be the real wiring."""
    compiled = compiled_links(build(CurriculumShape(phase1_iterations=1, phase2_iterations=1)))
    declared = {name: set(links) for name, links in stage_links(params).items()}
    assert compiled == declared


def test_the_shape_gives_the_cluster_its_sandbox_defaults():
    shape = CurriculumShape(sandbox_backend="kubernetes", sandbox_registry="reg.example.com")
    defaults = pipeline_defaults(build_curriculum(shape))
    assert (defaults["sandbox_backend"], defaults["sandbox_registry"]) == (
        "kubernetes",
        "reg.example.com",
    )
    assert pipeline_defaults(build_curriculum())["sandbox_backend"] == stage_default(
        "rollout.sandbox_backend", str
    )


@dataclass(frozen=True)
class _Stated:
    code_version: str = own("dev")
    """The code version."""
    max_turns: int = own(5)
    """Turns per episode, stated here rather than taken from the rollout config."""
    groups: int = stage("rollout.groups")
    """Groups per rollout."""


def _stated_pipeline(preset: Preset):
    ops = make_ops()

    def compose(p: _Stated) -> None:
        tasks = dsl.importer(artifact_uri="file:///tasks", artifact_class=dsl.Dataset)
        model = ops.prepare_model(code_version=p.code_version)
        ops.rollout(
            code_version=p.code_version,
            tasks=tasks.output,
            policy=model.outputs["model"],
            max_turns=p.max_turns,
            groups=p.groups,
        )

    function = pipeline_function(_Stated, compose, name="stated", summary="A test.", preset=preset)
    return dsl.pipeline(name="stated")(function)


def test_a_default_stated_outside_the_preset_fails():
    empty = Preset("none", "a test", {})
    assert undeclared_differences(_stated_pipeline(empty), empty) == [
        "max_turns = 5 sets rollout.max_turns (default 8) and is not in preset none"
    ]
    named = Preset("short", "a test", {"max_turns": Chosen(5, "a reason")})
    assert undeclared_differences(_stated_pipeline(named), named) == []


def test_a_preset_value_equal_to_the_default_fails():
    restating = Preset("restating", "a test", {"groups": Chosen(4, "no reason at all")})
    problems = undeclared_differences(_stated_pipeline(restating), restating)
    assert "groups: preset restating restates rollout.groups's default" in problems


def test_declarations_are_checked():
    with pytest.raises(ConfigError, match="names no parameter 'nope'"):
        _stated_pipeline(Preset("bad", "a test", {"nope": Chosen(1, "x")}))
    assert set(CONFIGS) >= set(COMPONENT_STAGES.values())

    @dataclass(frozen=True)
    class Disagreeing:
        max_new_tokens: int = stage("rollout.max_new_tokens", "eval.max_new_tokens")
        """Tokens per turn: the two stages' defaults differ."""

    with pytest.raises(ConfigError, match="defaults differ"):
        pipeline_function(Disagreeing, print, name="d", summary="d", preset=Preset("p", "", {}))
    assert [f.name for f in dataclasses.fields(Disagreeing)] == ["max_new_tokens"]
