"""The curriculum on kfp's local runner, end to end on the tiny model and real podman sandboxes.

One small run (4 tasks, 1 + 1 iterations, 2-turn episodes: ``first_run`` in
conftest.py) is shared by the tests: the second run must execute nothing (every
stage a cache hit with the first run's outputs) and a single-stage rerun must
import its inputs from the first run and execute only that stage.
"""

import io
import json
import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from kfp import dsl
from kfp.local import logging_utils, status

from pipelines.local import RunRecord, TaskRecord, _KfpRecords, _Progress, run_pipeline_locally
from pipelines.options import pipeline_arguments
from pipelines.pipeline_cli import rerun, run
from pipelines.rerun import plan_rerun
from termrl.artifacts import read_trajectories
from termrl.errors import ConfigError

# A fixed code_version: the cache must not depend on edits elsewhere in a shared tree.
TINY = [
    "--set",
    "code_version=pytest",
    "--set",
    "synth_count=4",
    "--set",
    "group_size=2",
    "--set",
    "groups=1",
    "--set",
    "max_turns=2",
    "--set",
    "max_new_tokens=24",
    "--set",
    "eval_max_turns=2",
    "--set",
    "rollout_concurrency=2",
    "--set",
    "heldout_count=3",
    "--set",
    "heldout_family_count=2",
    "--set",
    "expert_count=2",
    "--set",
    "demonstrate_every_phrasing=false",  # one replay per task: the voices are test_stage's
    "--set",
    "train.eps_high=0.3",
]
# prepare, 2 x (synthesize, verify), curate, 2 x demonstrate, imitation, 2 x (rollout, train),
# 2 health steps and after each the branch taken on its verdict, 4 evals (base, imitation,
# phase 1, final), compare
STAGES = 22
TASKS = STAGES + 2  # and the branches not taken


def _kfp_lines(task: str, outcome: status.Status, outputs: dict) -> str:
    """What kfp.local prints around one task, produced by kfp's own formatting helpers."""
    name = logging_utils.format_task_name(task)
    lines = [
        f"12:00:00.000 - INFO - Executing task {name}",
        "12:00:00.000 - INFO - Streamed logs:",
        "",
        "    stage output line",
        f"12:00:01.000 - INFO - Task {name} finished with status "
        f"{logging_utils.format_status(outcome)}",
    ]
    if outputs:
        lines.append(f"12:00:01.000 - INFO - Task {name} outputs:")
        lines += logging_utils.make_log_lines_for_outputs(outputs)
    return "\n".join([*lines, "-" * 80]) + "\n"


def test_progress_reads_kfp_lines(tmp_path):
    record = RunRecord(
        str(tmp_path),
        "p",
        {},
        tasks={
            "verify": TaskRecord("verify", "verify tasks"),
            "train": TaskRecord("train", "train"),
        },
    )
    shown: list[str] = []
    progress = _Progress(record, io.StringIO(), shown.append, False, tmp_path)
    outputs = {
        "admitted": dsl.Dataset(name="admitted", uri="/r/verify/admitted"),
        "verdicts": dsl.Dataset(name="verdicts", uri="/r/verify/verdicts"),
    }
    progress.write(_kfp_lines("verify", status.Status.SUCCESS, outputs))
    progress.write(_kfp_lines("train", status.Status.FAILURE, {})[:-5])  # a partial line waits...
    progress.write("-----\n")
    verify, train = record.tasks["verify"], record.tasks["train"]
    assert verify.state == "executed" and verify.outputs == {
        "admitted": "/r/verify/admitted",
        "verdicts": "/r/verify/verdicts",
    }
    assert train.state == "failed" and "    stage output line" in train.log_tail
    assert shown[0] == "[ 1/2] verify tasks ..." and shown[1].startswith(
        "[ 1/2] verify tasks: executed in"
    )
    assert shown[-2].startswith("[ 2/2] train: failed in")
    assert (
        shown[-1].rstrip().endswith("stage output line")
    )  # a failure shows the stage's own output


def test_cache_hits_come_from_kfp_records(tmp_path):
    (tmp_path / "abcdef123456ffff.json").write_text(
        json.dumps({"model": {"__kfp_artifact__": True, "uri": "/old/run/model", "name": "model"}})
    )
    record = RunRecord(
        str(tmp_path), "p", {}, tasks={"prepare-model": TaskRecord("prepare-model", "prepare")}
    )
    shown: list[str] = []
    handler = _KfpRecords(_Progress(record, io.StringIO(), shown.append, False, tmp_path))
    message = "Task prepare-model cache hit (key=abcdef123456); skipping execution."
    handler.emit(logging.LogRecord("root", logging.INFO, __file__, 1, message, None, None))
    assert record.tasks["prepare-model"].state == "cached"
    assert record.tasks["prepare-model"].outputs == {"model": "/old/run/model"}
    assert shown == ["[ 1/1] prepare: cached (not executed)"]


def test_settings_are_typed_by_their_defaults():
    defaults = {"synth_count": 12, "learning_rate": 0.0, "base_model": "", "flag": False}
    values = pipeline_arguments(
        defaults, ("synth_count=4", "learning_rate=1e-5", "base_model=/m", "flag=yes")
    )
    assert values == {"synth_count": 4, "learning_rate": 1e-5, "base_model": "/m", "flag": True}
    assert isinstance(values["synth_count"], int)
    with pytest.raises(ConfigError) as error:
        pipeline_arguments(defaults, ("synth_cnt=4", "flag=maybe", "synth_count"))
    assert len(error.value.problems) == 3


def test_stage_fields_go_into_that_stages_options_typed_by_its_config():
    defaults = {"groups": 8, "train_options": {}, "rollout_options": {"seed": 3}}
    values = pipeline_arguments(
        defaults,
        (
            "train.negative_weight=0.5",
            "train.max_steps=2",
            "rollout.dynamic_sampling=4",
            "groups=16",
        ),
    )
    assert values == {
        "groups": 16,
        "train_options": {"negative_weight": 0.5, "max_steps": 2},
        "rollout_options": {"seed": 3, "dynamic_sampling": 4},
    }
    json.dumps(values)  # a kfp parameter: JSON all the way down
    with pytest.raises(ConfigError) as error:
        pipeline_arguments(
            defaults, ("train.negative_wieght=0.5", "train.max_steps=two", "eval.trials=2")
        )
    problems = "\n".join(error.value.problems)
    assert len(error.value.problems) == 3
    assert (
        "train: unknown setting 'negative_wieght'" in problems
        and "train: max_steps='two'" in problems
    )
    assert "no options to a 'eval' stage" in problems and "rollout, train" in problems


@pytest.mark.ci
@pytest.mark.slow
@pytest.mark.podman
def test_run_shows_progress_report_and_table(first_run):
    runs, _, output = first_run
    record = RunRecord.load(runs / "first")
    assert record.ok and len(record.executed()) == STAGES and record.count("skipped") == 2
    # kfp orders independent root stages as it likes: prepare-model is one of them, at any position
    assert re.search(
        rf"^\[ ?\d+/{TASKS}\] prepare base policy: executed in ", output, re.MULTILINE
    ), output
    assert re.search(rf"^\[ ?\d+/{TASKS}\] phase 1 · (roll back|go on) 1/1: skipped", output, re.M)
    assert "phase 2 · train 1/1 (full): executed" in output
    report = Path(output.split("report: ", 1)[1].split()[0])
    assert report == runs / "first" / "report.html"
    assert report.read_text() == Path(record.tasks["compare"].outputs["report"]).read_text()
    assert "Comparison" in report.read_text()
    table = output.split("held-out tasks: base vs imitation vs phase1 vs final policy", 1)[
        1
    ].splitlines()
    assert table[1].split() == ["policy", "tasks", "trials", "passed", "pass", "rate"]
    assert [line.split()[0] for line in table[2:6]] == ["base", "imitation", "phase1", "final"]
    metrics = json.loads(Path(record.tasks["compare"].outputs["metrics"]).read_text())
    assert f"{metrics['eval/base_pass_rate']:.1%}" == table[2].split()[-1]
    assert record.arguments["train_options"] == {"eps_high": 0.3}  # --set train.eps_high=0.3
    assert (
        '"eps_high": 0.3' in (runs / "first" / "run.log").read_text()
    )  # and it reached the stages


@pytest.mark.ci
@pytest.mark.slow
@pytest.mark.podman
def test_second_run_executes_nothing(first_run):
    runs, args, _ = first_run
    result = CliRunner().invoke(run, [a if a != "first" else "second" for a in args])
    assert result.exit_code == 0, result.output
    assert f"0 stage(s) executed, {STAGES} cached, 2 in branches not taken" in result.output
    first, second = RunRecord.load(runs / "first"), RunRecord.load(runs / "second")
    assert second.executed() == []
    assert {t.state for t in second.tasks.values()} == {"cached", "skipped"}
    # cached tasks hand on the first run's artifacts, so downstream keys matched too
    assert {n: t.outputs for n, t in second.tasks.items()} == {
        n: t.outputs for n, t in first.tasks.items()
    }
    assert "Executing task" not in (runs / "second" / "run.log").read_text()


@pytest.mark.ci
@pytest.mark.slow
@pytest.mark.podman
def test_rerun_one_stage_on_upstream_artifacts(first_run):
    runs, _, _ = first_run
    run_dir = runs / "first"
    args = ["train-2", "--run", str(run_dir), "--set", "max_steps=1", "--set", "eps_high=0.28"]
    result = CliRunner().invoke(rerun, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    first = RunRecord.load(run_dir)
    assert "upstream stages not executed" in result.output
    # train-2 is phase 1's train: the rollout's trajectories, the imitation policy, the demonstrations
    assert f"trajectories <- {first.tasks['rollout'].outputs['trajectories']}" in result.output
    assert f"policy <- {first.tasks['train'].outputs['checkpoint']}" in result.output
    assert (
        f"demonstrations <- {first.tasks['demonstrate'].outputs['demonstrations']}" in result.output
    )
    assert "rerun · train-2: executed" in result.output
    (rerun_dir,) = (run_dir / "reruns").iterdir()
    record = RunRecord.load(rerun_dir)
    stage = next(t for t in record.tasks.values() if not t.name.startswith("importer"))
    assert stage.state == "executed" and stage.display_name == "rerun · train-2"
    importers = [t for t in record.tasks.values() if t is not stage]
    assert len(importers) == 3 and {t.state for t in importers} == {
        "imported"
    }  # nothing upstream ran
    checkpoint = Path(stage.outputs["checkpoint"])
    assert (checkpoint / "config.json").is_file() and checkpoint != Path(
        first.tasks["train-2"].outputs["checkpoint"]
    )
    log = (rerun_dir / "run.log").read_text()
    assert (
        '"eps_high": 0.28' in log and '"max_steps": 1' in log
    )  # the --set values reached the stage

    again = CliRunner().invoke(rerun, args)
    assert again.exit_code == 0, again.output
    assert "rerun · train-2: cached" in again.output


@pytest.mark.slow
@pytest.mark.podman
def test_rerun_names_the_stages_it_knows(first_run):
    runs, _, _ = first_run
    result = CliRunner().invoke(rerun, ["training", "--run", str(runs / "first")])
    assert result.exit_code != 0
    assert "no stage 'training'" in result.output and "train-2" in result.output


@pytest.mark.ci
@pytest.mark.slow
@pytest.mark.podman
def test_rerun_takes_a_policy_from_the_branch_that_ran(first_run):
    runs, _, _ = first_run
    record = RunRecord.load(runs / "first")
    # phase 2's train starts from the policy handed on by the branch taken after phase 1's health
    (ran,) = [
        record.tasks[name]
        for name in ("continue-from", "continue-from-2")  # phase 1's roll back, go on
        if record.tasks[name].state != "skipped"
    ]
    plan = plan_rerun(record, "train-3", [])
    assert plan.artifacts["policy"][0] == ran.outputs["next_policy"]
    with pytest.raises(ConfigError, match="no stage 'continue-from'"):
        plan_rerun(record, "continue-from", [])


@dsl.component(base_image="python:3.11")
def _make(text: str, out: dsl.Output[dsl.Model]):
    with open(out.path, "w") as f:  # the body runs alone: no module imports
        f.write(text)


@dsl.component(base_image="python:3.11")
def _pass_on(given: dsl.Input[dsl.Model], out: dsl.Output[dsl.Model]):
    with open(given.path) as src, open(out.path, "w") as dst:
        dst.write(src.read())


@dsl.component(base_image="python:3.11")
def _read(given: dsl.Input[dsl.Model]) -> str:
    with open(given.path) as f:
        return f.read()


@dsl.pipeline(name="one-of-artifacts")
def _one_of_pipeline(take: str = "new") -> str:
    new, old = _make(text="new"), _make(text="old")
    with dsl.If(take == "new"):
        a = _pass_on(given=new.outputs["out"])
    with dsl.Else():
        b = _pass_on(given=old.outputs["out"])
    return _read(given=dsl.OneOf(a.outputs["out"], b.outputs["out"])).output


def test_a_one_of_over_artifacts_kfp_alone_refuses_is_resolved_to_the_branch_that_ran(tmp_path):
    from kfp import local

    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "kfp"))
    # If this stops raising, kfp resolves it itself: drop pipelines.local._artifact_one_of.
    with pytest.raises(ValueError, match="Expected 1 artifact in ArtifactSelectorSpec"):
        _one_of_pipeline(take="old")
    for take in ("new", "old"):
        record = run_pipeline_locally(
            _one_of_pipeline,
            {"take": take},
            run_dir=tmp_path / take,
            cache_dir=tmp_path / "cache",
            echo=lambda _: None,
        )
        assert record.ok
        taken, skipped = ("pass-on", "pass-on-2") if take == "new" else ("pass-on-2", "pass-on")
        assert (record.tasks[taken].state, record.tasks[skipped].state) == ("executed", "skipped")
        assert Path(record.tasks[taken].outputs["out"]).read_text() == take
        assert re.search(rf"Output: '{take}'", (tmp_path / take / "run.log").read_text())


@pytest.mark.slow
@pytest.mark.podman
def test_a_colocated_run_rolls_out_and_trains_each_round_in_one_task(first_run):
    """``termrl run --colocate`` on the first run's cache: the stages before the RL rounds are
    cached, each round is one task (rollout and train on kfp's local runner, the artifacts as the
    two stages write them), and health, the branches and the evals read its outputs."""
    runs, args, _ = first_run
    result = CliRunner().invoke(
        run, [a if a != "first" else "colocated" for a in args] + ["--colocate"]
    )
    assert result.exit_code == 0, result.output
    record = RunRecord.load(runs / "colocated")
    assert record.ok and record.shape["colocate"] is True
    executed = set(record.executed())
    assert {"colocated-round", "colocated-round-2"} <= executed
    assert not any(name.startswith("rollout") for name in record.tasks)
    assert record.tasks["train"].state == "cached"  # the imitation step, as in the first run
    assert "phase 1 · rollout + train 1/1 (positive-only, colocated): executed" in result.output
    for name in ("colocated-round", "colocated-round-2"):
        outputs = record.tasks[name].outputs
        assert (Path(outputs["checkpoint"]) / "config.json").is_file()
        assert read_trajectories(outputs["trajectories"]).num_rows > 0
        metrics = json.loads(Path(outputs["metrics"]).read_text())
        assert metrics["rollout/episodes"] == 2 and metrics["colocate/to_train_sec"] > 0
    assert record.tasks["compare"].state == "executed"

    # One round again, on the run's artifacts, each stage's fields set apart.
    settings = ["--set", "rollout.redundancy=0", "--set", "train.max_steps=1"]
    again = CliRunner().invoke(
        rerun, ["colocated-round", "--run", str(runs / "colocated"), *settings]
    )
    assert again.exit_code == 0, again.output + repr(again.exception)
    (folder,) = (runs / "colocated" / "reruns").iterdir()
    log = (folder / "run.log").read_text()
    assert '"redundancy": 0' in log and '"max_steps": 1' in log  # each reached its stage
    assert "rerun · colocated-round: executed" in again.output
    bad = CliRunner().invoke(
        rerun, ["colocated-round", "--run", str(runs / "colocated"), "--set", "max_steps=1"]
    )
    assert bad.exit_code != 0 and "rollout.FIELD=VALUE or train.FIELD=VALUE" in bad.output
