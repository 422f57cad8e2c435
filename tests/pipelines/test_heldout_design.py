"""The default held-out design, synthesized as the compiled curriculum wires it.

The two synthesize tasks of the compiled pipeline are run for real (the synthesize stage, at the
CPU_CURRICULUM preset's sizes) with the inputs the spec binds them to. Declared overlap: the
training families' held-out tasks share templates with their training tasks, from other seeds.
Everything else must be disjoint: no task (id or instruction) in both, no left-out family in any
training task, and each slice large enough to report with an interval.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from google.protobuf import json_format

from components.eval.compare import family_list
from components.synthesize.config import SynthesizeConfig
from components.synthesize.dedup import jaccard, shingles
from components.synthesize.stage import main as synthesize
from pipelines.curriculum import build_curriculum
from pipelines.glue import curate_pools
from pipelines.local import pipeline_defaults
from pipelines.spec_tasks import leaf_tasks
from termrl.artifacts import Task, load_tasks, save_tasks, write_verdicts

LISTS = ("families", "exclude_families", "extra_families", "difficulties")


def _synthesize_inputs(pipeline, leaf_name: str) -> tuple[dict, dict]:
    """The parameter values (defaults resolved) and artifact producers of one synthesize task."""
    defaults = pipeline_defaults(pipeline)
    task = leaf_tasks(pipeline.pipeline_spec)[leaf_name].task
    values = {}
    for key, spec in task.inputs.parameters.items():
        if spec.component_input_parameter:
            values[key] = defaults[spec.component_input_parameter.removeprefix("pipelinechannel--")]
        else:
            values[key] = json_format.MessageToDict(spec.runtime_value.constant)
    producers = {
        key: (
            spec.task_output_artifact.producer_task,
            spec.task_output_artifact.output_artifact_key,
        )
        for key, spec in task.inputs.artifacts.items()
    }
    return values, producers


def _config(values: dict, out: Path, avoid: str = "") -> SynthesizeConfig:
    """What the synthesize component builds from its inputs ('' and unset lists are the default)."""
    fields = {k: values[k] for k in ("count", "seed", "extra_count") if values.get(k) is not None}
    for key in LISTS:
        if values.get(key):
            fields[key] = tuple(family_list(values[key]))
    return SynthesizeConfig(out=str(out), avoid=avoid, progress=False, **fields)


@pytest.fixture(scope="module")
def design(tmp_path_factory) -> tuple[list[Task], list[Task], set[str], dict]:
    pipeline = build_curriculum()
    out = tmp_path_factory.mktemp("design")
    training_values, _ = _synthesize_inputs(pipeline, "synthesize")
    heldout_values, producers = _synthesize_inputs(pipeline, "synthesize-2")
    assert producers == {
        "avoid": ("synthesize", "tasks")
    }  # the held-out set avoids the training set
    synthesize(_config(training_values, out / "training.parquet"))
    synthesize(
        _config(heldout_values, out / "heldout.parquet", avoid=str(out / "training.parquet"))
    )
    left_out = set(family_list(pipeline_defaults(pipeline)["heldout_families"]))
    return (
        load_tasks(out / "training.parquet"),
        load_tasks(out / "heldout.parquet"),
        left_out,
        heldout_values,
    )


def test_left_out_families_are_named_and_in_no_training_task(design):
    training, heldout, left_out, _ = design
    assert len(left_out) >= 3
    assert not left_out & {t.family for t in training}
    assert left_out <= {t.family for t in heldout}
    # The training tasks are at the preset's difficulties; the held-out set measures those and more.
    trained_levels = set(family_list(pipeline_defaults(build_curriculum())["synth_difficulties"]))
    assert {t.difficulty for t in training} == trained_levels
    assert trained_levels <= {t.difficulty for t in heldout if t.family not in left_out}


def test_no_task_is_both_trained_on_and_held_out(design):
    training, heldout, _, _ = design
    assert not {t.id for t in training} & {t.id for t in heldout}
    assert not {t.instruction for t in training} & {t.instruction for t in heldout}
    # Nor a near-duplicate (the synthesize stage's own threshold): same template, same values.
    threshold = SynthesizeConfig().dedup_threshold
    trained = [shingles(t.instruction) for t in training]
    for task in heldout:
        mine = shingles(task.instruction)
        assert max(jaccard(mine, other) for other in trained) < threshold, task.id


def test_same_family_tasks_share_templates_only_by_design(design):
    """The declared overlap: held-out tasks of a trained family come from its generator, with
    other seeds than any training task's."""
    training, heldout, left_out, _ = design
    trained_families = {t.family for t in training}
    same_family = [t for t in heldout if t.family not in left_out]
    assert {t.family for t in same_family} <= trained_families
    assert not {t.seed for t in same_family} & {t.seed for t in training}


def test_every_slice_is_large_enough_to_report(design):
    _, heldout, left_out, _ = design
    slices = Counter(
        "left-out" if t.family in left_out else f"same-family {t.difficulty}" for t in heldout
    )
    assert sum(slices.values()) >= 60
    assert slices["left-out"] >= 12
    assert slices["same-family easy"] >= 20 and slices["same-family medium"] >= 20
    left_out_levels = Counter(t.difficulty for t in heldout if t.family in left_out)
    assert set(left_out_levels) == {"easy", "medium"}


def test_the_left_out_families_are_settings(design):
    """Rotating them is one parameter: the held-out task's exclude and extra families are bound
    to heldout_families, its seed to heldout_seed, its difficulties to heldout_difficulties."""
    pipeline = build_curriculum()
    task = leaf_tasks(pipeline.pipeline_spec)["synthesize-2"].task
    bound = {
        key: spec.component_input_parameter.removeprefix("pipelinechannel--")
        for key, spec in task.inputs.parameters.items()
    }
    assert bound["exclude_families"] == bound["extra_families"] == "heldout_families"
    assert bound["seed"] == "heldout_seed" and bound["extra_count"] == "heldout_family_count"
    assert bound["difficulties"] == "heldout_difficulties"
    training = leaf_tasks(pipeline.pipeline_spec)["synthesize"].task
    assert (
        training.inputs.parameters["exclude_families"].component_input_parameter.removeprefix(
            "pipelinechannel--"
        )
        == "heldout_families"
    )


def _curate(training: list[Task], folder: Path) -> tuple[list[Task], list[Task], list[Task]]:
    """The imitation, phase-1 and expert pools ``curate`` makes at the preset's sizes, with every
    training task admitted at no false-positive risk."""
    defaults = pipeline_defaults(build_curriculum())
    save_tasks(folder / "admitted.parquet", training)
    write_verdicts(
        folder / "verdicts.parquet",
        [
            {"task_id": t.id, "admitted": True, "reason": "admitted", "false_positive_risk": 0.0}
            for t in training
        ],
    )
    outs = [folder / f"{name}.parquet" for name in ("imitation", "train", "expert")]
    curate_pools(
        folder / "admitted.parquet",
        folder / "verdicts.parquet",
        *outs,
        imitation_fraction=defaults["imitation_fraction"],
        expert_tasks="",
        expert_count=defaults["expert_count"],
        seed=defaults["synth_seed"],
    )
    imitation, phase1, expert = (load_tasks(p) for p in outs)
    assert len(expert) == defaults["expert_count"]
    assert {t.id for t in expert} <= {t.id for t in phase1}
    return imitation, phase1, expert


def test_phase_2_draws_its_expert_pool_from_the_phase_1_pool(design, tmp_path):
    training, _, _, _ = design
    imitation, phase1, expert = _curate(training, tmp_path)
    assert not {t.id for t in imitation} & {t.id for t in phase1}
    assert {t.family for t in imitation} == {t.family for t in phase1}  # every family in both


def test_with_medium_training_tasks_phase_2_draws_the_medium_ones_first(tmp_path):
    """``--set synth_difficulties=easy,medium``: the expert pool is all medium, and the imitation
    step sees medium demonstrations too."""
    values, _ = _synthesize_inputs(build_curriculum(), "synthesize")
    out = tmp_path / "training.parquet"
    synthesize(_config({**values, "difficulties": "easy,medium"}, out))
    imitation, phase1, expert = _curate(load_tasks(out), tmp_path)
    assert len([t for t in phase1 if t.difficulty == "medium"]) >= len(expert)
    assert {t.difficulty for t in expert} == {"medium"}
    assert Counter(t.difficulty for t in imitation)["medium"] >= 10
