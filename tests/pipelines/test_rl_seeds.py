"""The RL seeds bench (``bench/rl_seeds.py``): its statistics, its pipeline, and one tiny run.

The statistics are checked against values computed by hand (the t quantiles against a
printed table); the pipeline against the curriculum's own phase-1 tasks (the same
parameters but the seeds); the end-to-end test runs the bench with two seeds on the
tiny curriculum run (``first_run``) and resumes it.
"""

import json
import math
from pathlib import Path

import pytest
from kfp.local import executor_output_utils

from bench.rl_seeds import (
    RunInputs,
    bench_pipeline,
    main,
    on_tasks,
    pooled_paired_difference,
    read_run,
    report_lines,
    results_folder,
    round_seed,
    summarize,
    t_quantile_975,
)
from components.synthesize.generate import make_task, task_seed
from pipelines.curriculum import EVAL_IMITATION, CurriculumShape, build_curriculum
from pipelines.local import RunRecord, TaskRecord, pipeline_defaults
from pipelines.spec_tasks import leaf_tasks
from termrl.artifacts import load_tasks, read_eval_results, save_tasks
from termrl.errors import ConfigError


@pytest.mark.parametrize(
    ("df", "quantile"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (5, 2.5706), (10, 2.2281), (30, 2.0423)],
)
def test_t_quantile_matches_the_printed_table(df, quantile):
    assert t_quantile_975(df) == pytest.approx(quantile, abs=1e-4)


def test_t_quantile_refuses_no_degrees_of_freedom():
    with pytest.raises(ValueError, match="df >= 1"):
        t_quantile_975(0)


def _rates(values: list[int]) -> dict[str, float]:
    return {f"t{i}": float(v) for i, v in enumerate(values)}


def test_pooled_difference_whose_interval_excludes_zero():
    # per-task mean over the 2 seeds minus imitation: d = [1, .5, .5, .5, 0, .5]
    imitation = _rates([0, 0, 0, 0, 0, 0])
    seeds = {0: _rates([1, 1, 0, 1, 0, 0]), 1: _rates([1, 0, 1, 0, 0, 1])}
    d = pooled_paired_difference(imitation, seeds)
    # mean .5; sum of squared deviations .5, sd sqrt(.5 / 5) = .316228; se = sd / sqrt(6)
    # = .129099; t(.975, 5) = 2.570582: half-width .331861
    assert d.diff == pytest.approx(0.5)
    assert (d.low, d.high) == pytest.approx((0.168139, 0.831861), abs=2e-6)
    assert (d.tasks, d.seeds, d.gained, d.lost) == (6, 2, 5, 0)
    assert d.low > 0


def test_pooled_difference_whose_interval_spans_zero():
    # d = [1, .5, 0, .5, 0]
    imitation = _rates([0, 0, 1, 0, 1])
    seeds = {0: _rates([1, 1, 1, 0, 1]), 1: _rates([1, 0, 1, 1, 1])}
    d = pooled_paired_difference(imitation, seeds)
    # mean .4; squared deviations .36 + .01 + .16 + .01 + .16 = .7, sd sqrt(.7 / 4) = .418330;
    # se = sd / sqrt(5) = .187083; t(.975, 4) = 2.776445: half-width .519425
    assert d.diff == pytest.approx(0.4)
    assert (d.low, d.high) == pytest.approx((-0.119425, 0.919425), abs=2e-6)
    assert (d.gained, d.lost) == (3, 0)
    assert d.low < 0 < d.high


def test_pooled_difference_with_a_loss_and_three_seeds():
    # d = [1/3 - 1, 1 - 0, 2/3 - 0] = [-2/3, 1, 2/3]: mean 1/3
    imitation = {"a": 1.0, "b": 0.0, "c": 0.0}
    seeds = {
        0: {"a": 1.0, "b": 1.0, "c": 1.0},
        1: {"a": 0.0, "b": 1.0, "c": 1.0},
        2: {"a": 0.0, "b": 1.0, "c": 0.0},
    }
    d = pooled_paired_difference(imitation, seeds)
    # deviations -1, 2/3, 1/3: squares 1 + 4/9 + 1/9 = 14/9; sd sqrt(7/9); t(.975, 2) = 4.302653
    half = 4.302653 * math.sqrt(7 / 9) / math.sqrt(3)
    assert d.diff == pytest.approx(1 / 3)
    assert (d.low, d.high) == pytest.approx((1 / 3 - half, 1 / 3 + half), abs=2e-6)
    assert (d.gained, d.lost, d.seeds) == (2, 1, 3)


def test_pooled_difference_refuses_seeds_on_other_tasks():
    imitation = _rates([0, 1, 0])
    seeds = {0: _rates([1, 1, 0]), 1: {"t0": 1.0, "t1": 1.0, "other": 0.0}}
    with pytest.raises(ValueError, match=r"seed 1: tasks not evaluated \['t2'\].*\['other'\]"):
        pooled_paired_difference(imitation, seeds)
    with pytest.raises(
        ValueError, match="tasks not evaluated none, tasks the imitation eval lacks"
    ):
        pooled_paired_difference({"t0": 0.0, "t1": 1.0}, {0: _rates([1, 1, 0])})


def test_pooled_difference_refuses_too_little_to_pool():
    with pytest.raises(ValueError, match="no seed results"):
        pooled_paired_difference(_rates([0, 1]), {})
    with pytest.raises(ValueError, match="at least 2 tasks"):
        pooled_paired_difference({"t0": 0.0}, {0: {"t0": 1.0}})


def _row(task: str, family: str, difficulty: str, passed: bool) -> dict:
    return {"task_id": task, "family": family, "difficulty": difficulty, "passed": passed}


def _rows(passed: list[int]) -> list[dict]:
    """Six tasks: two easy, two medium of trained families, two of the left-out family ``sql``."""
    kinds = [("git", "easy"), ("csv", "easy"), ("git", "medium"), ("csv", "medium")]
    kinds += [("sql", "easy"), ("sql", "medium")]
    return [
        _row(f"t{i}", f, d, bool(p))
        for i, ((f, d), p) in enumerate(zip(kinds, passed, strict=True))
    ]


def test_summary_reports_each_slice_per_seed_and_pooled():
    imitation = _rows([1, 0, 0, 0, 0, 0])
    seeds = {0: _rows([1, 1, 1, 0, 0, 0]), 3: _rows([1, 1, 0, 0, 1, 0])}
    summary = summarize(imitation, seeds, ["sql"])
    assert summary["slices"] == ["all", "left-out families", "trained easy", "trained medium"]
    assert summary["per_seed"]["3"]["all"]["rl"]["pass_rate"] == pytest.approx(3 / 6)
    assert summary["per_seed"]["3"]["all"]["imitation"]["pass_rate"] == pytest.approx(1 / 6)
    easy = summary["per_seed"]["0"]["trained easy"]
    assert (easy["imitation"]["pass_rate"], easy["rl"]["pass_rate"], easy["diff"]) == (0.5, 1, 0.5)
    assert easy["rl"]["trials"] == 2 and easy["rl"]["low"] < 1.0 == easy["rl"]["high"]
    # easy: d = [0, 1]: mean .5, sd sqrt(.5), t(.975, 1) = 12.7062
    pooled = summary["pooled"]["trained easy"]
    assert pooled["diff"] == pytest.approx(0.5) and pooled["tasks"] == 2
    assert pooled["high"] - pooled["diff"] == pytest.approx(12.7062 * 0.5, abs=1e-3)
    # left out: d = [.5, 0]; all: d = [0, 1, .5, 0, .5, 0]
    assert summary["pooled"]["left-out families"]["diff"] == pytest.approx(0.25)
    assert summary["pooled"]["all"]["diff"] == pytest.approx(2 / 6)
    lines = report_lines(summary)
    # seed 3 on the left-out family: imitation 0 of 2, RL 1 of 2
    assert any(
        line.startswith("3 ") and "left-out families" in line and line.endswith("+50.0")
        for line in lines
    )
    assert any("+33.3" in line and "6 tasks x 2 seeds" in line for line in lines)


def test_summary_refuses_a_seed_that_missed_a_task():
    imitation = _rows([1, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"seed 1: tasks not evaluated \['t5'\]"):
        summarize(imitation, {0: _rows([1] * 6), 1: _rows([1] * 6)[:5]}, ["sql"])


def test_summary_leaves_a_one_task_slice_without_interval():
    imitation = _rows([1, 0, 0, 0, 0, 0])[:5]  # the left-out family keeps one task
    summary = summarize(imitation, {0: _rows([1] * 6)[:5]}, ["sql"])
    assert summary["pooled"]["left-out families"] is None
    assert any("fewer than 2 tasks" in line for line in report_lines(summary))


def _inputs(rounds: int) -> RunInputs:
    return RunInputs(
        run_dir=Path("/runs/x"),
        recorded_shape={},
        phase1_rounds=rounds,
        arguments={},
        imitation="/runs/x/imitation",
        train_pool="/runs/x/train_pool",
        anchors="/runs/x/anchors",
        demonstrations="/runs/x/demonstrations",
        heldout="/runs/x/heldout",
        imitation_results=None,
    )


def _parameters(spec, leaf) -> dict:
    """A task's parameters: the pipeline parameter each reads, its constant, or the output of
    another task (by that task's display name: kfp numbers tasks in the order they are made)."""

    def source(value):
        if value.component_input_parameter:
            return value.component_input_parameter
        if value.HasField("task_output_parameter"):
            output = value.task_output_parameter
            producer = spec.root.dag.tasks[output.producer_task].task_info.name
            return (producer, output.output_parameter_key)
        return executor_output_utils.pb2_value_to_python(value.runtime_value.constant)

    return {name: source(value) for name, value in leaf.task.inputs.parameters.items()}


@pytest.mark.parametrize("rounds", [1, 2])
def test_a_seed_runs_the_curriculums_phase1_rounds_with_only_the_seeds_changed(rounds):
    shape = CurriculumShape(rounds, 1, code_version="pytest")
    specs = (
        build_curriculum(shape).pipeline_spec,
        bench_pipeline(_inputs(rounds), shape, 2).pipeline_spec,
    )
    curriculum, bench = (
        {leaf.display_name: _parameters(spec, leaf) for leaf in leaf_tasks(spec).values()}
        for spec in specs
    )
    stages = [name for name in bench if name.startswith("phase 1 · ")]
    assert len(stages) == 5 * rounds and all(name in curriculum for name in stages)
    for name in stages:
        ours, theirs = dict(bench[name]), dict(curriculum[name])
        if "seed" in theirs:  # rollout and train: seed 1000 · s + r, all else the curriculum's
            assert ours.pop("seed") == round_seed(2, int(theirs.pop("seed")))
        assert ours == theirs, name
    evaluation = bench["eval · RL seed 2"]
    assert evaluation == curriculum[EVAL_IMITATION] | {"run_id": evaluation["run_id"]}


def _fake_run(folder: Path, evaluated_imitation: bool) -> Path:
    """A run record of the default curriculum whose every output is a file named
    ``<task display name>/<output>`` (the imitation eval's only if ``evaluated_imitation``)."""
    pipeline = build_curriculum(CurriculumShape(1, 1, code_version="pytest"))
    tasks = {}
    for name, leaf in leaf_tasks(pipeline.pipeline_spec).items():
        done = evaluated_imitation or leaf.display_name != EVAL_IMITATION
        outputs = {}
        for key in ("checkpoint", "train_pool", "demonstrations", "admitted", "results"):
            path = folder / leaf.display_name / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            outputs[key] = str(path)
        tasks[name] = TaskRecord(name, leaf.display_name, "executed" if done else "pending")
        tasks[name].outputs = outputs if done else {}
    arguments = pipeline_defaults(pipeline) | {"heldout_families": "sql-sqlite, git"}
    record = RunRecord(str(folder), "termrl-curriculum", arguments, {"phase1_iterations": 1})
    record.tasks = tasks
    record.save()
    return folder


def test_the_bench_reads_the_artifacts_the_runs_phase1_and_imitation_eval_read(tmp_path):
    inputs = read_run(_fake_run(tmp_path, evaluated_imitation=True))
    assert inputs.imitation == str(tmp_path / "imitation · train on demonstrations" / "checkpoint")
    assert inputs.train_pool == str(tmp_path / "curate pools" / "train_pool")
    assert inputs.anchors == str(tmp_path / "demonstrate · phase-1 pool" / "demonstrations")
    assert inputs.demonstrations == str(
        tmp_path / "demonstrate · imitation pool" / "demonstrations"
    )
    assert inputs.heldout == str(tmp_path / "verify held-out tasks" / "admitted")
    assert inputs.imitation_results == str(tmp_path / EVAL_IMITATION / "results")
    assert inputs.heldout_families == ["sql-sqlite", "git"] and inputs.phase1_rounds == 1


def test_a_run_without_its_imitation_eval_gets_one_from_the_bench(tmp_path):
    inputs = read_run(_fake_run(tmp_path, evaluated_imitation=False))
    assert inputs.imitation_results is None
    spec = bench_pipeline(inputs, CurriculumShape(1, 0, code_version="pytest"), None).pipeline_spec
    assert [leaf.display_name for leaf in leaf_tasks(spec).values()].count(EVAL_IMITATION) == 1


def test_the_bench_refuses_a_run_with_no_phase1(tmp_path):
    folder = _fake_run(tmp_path, evaluated_imitation=True)
    record = RunRecord.load(folder)
    record.shape = {"phase1_iterations": 0, "phase2_iterations": 1}
    record.save()
    with pytest.raises(ConfigError, match="no phase-1 round"):
        read_run(folder)


def test_the_bench_evaluates_both_policies_on_another_task_set(tmp_path):
    tasks = tmp_path / "easy.parquet"
    save_tasks(tasks, [make_task("text-processing", "easy", task_seed(7, i)) for i in range(3)])
    inputs = on_tasks(read_run(_fake_run(tmp_path / "run", evaluated_imitation=True)), tasks)
    assert inputs.heldout == str(tasks.resolve())
    assert inputs.imitation_results is None  # the run's imitation eval measured other tasks
    folder = results_folder(tmp_path / "bench", tasks)
    assert folder.parent == tmp_path / "bench" and folder.name.startswith("on-easy-")
    assert results_folder(tmp_path / "bench", tmp_path / "other" / "easy.parquet") != folder
    assert results_folder(tmp_path / "bench", None) == tmp_path / "bench"


def test_the_bench_refuses_a_task_set_it_cannot_pair_over(tmp_path):
    inputs = read_run(_fake_run(tmp_path / "run", evaluated_imitation=True))
    with pytest.raises(ConfigError, match="no such file"):
        on_tasks(inputs, tmp_path / "missing.parquet")
    (tmp_path / "notes.parquet").write_text("not parquet")
    with pytest.raises(ConfigError, match="not a task set"):
        on_tasks(inputs, tmp_path / "notes.parquet")
    save_tasks(tmp_path / "one.parquet", [make_task("git", "easy", 1)])
    with pytest.raises(ConfigError, match="1 task"):
        on_tasks(inputs, tmp_path / "one.parquet")
    with pytest.raises(SystemExit, match="no such file"):
        main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "b"), "--tasks", "/nope"])


@pytest.mark.slow
@pytest.mark.podman
def test_bench_runs_two_seeds_on_a_run_and_resumes(first_run, tmp_path, capsys):
    runs, _, _ = first_run
    run_dir = runs / "first"
    out = tmp_path / "bench"
    main(["--run", str(run_dir), "--out", str(out), "--seeds", "0,1"])
    printed = capsys.readouterr().out
    for seed in (0, 1):
        assert f"seed-{seed}: " in printed and "phase 1 · rollout 1/1: executed" in printed
    record = RunRecord.load(run_dir)
    (evaluated,) = [t for t in record.tasks.values() if t.display_name == EVAL_IMITATION]
    imitation = evaluated.outputs["results"]  # the run's own: reused, not evaluated again
    assert f"imitation-only baseline: {imitation}" in printed
    summary = json.loads((out / "rl_seeds.json").read_text())
    tasks = read_eval_results(imitation).column("task_id").to_pylist()
    assert summary["pooled"]["all"]["tasks"] == len(set(tasks))
    assert summary["pooled"]["all"]["seeds"] == 2 and summary["round_seeds"] == {
        "0": [1],
        "1": [1001],
    }
    for seed in (0, 1):
        rows = read_eval_results(out / f"seed-{seed}" / "results.parquet").to_pylist()
        assert {r["run_id"] for r in rows} == {f"seed-{seed}"}
        # the policy evaluated is the seed's own phase-1 policy, not the imitation checkpoint
        assert all(str(out.resolve()) in r["model"] for r in rows)
    assert "RL − imitation, pooled over seeds" in printed

    main(["--run", str(run_dir), "--out", str(out), "--seeds", "0,1"])
    again = capsys.readouterr().out
    assert "seed-0: " not in again and "seed-1: " not in again  # both done: nothing runs
    assert json.loads((out / "rl_seeds.json").read_text())["pooled"] == summary["pooled"]

    # on another task set: the seeds' rounds come from the cache, only the evals run
    two = tmp_path / "two.parquet"
    save_tasks(two, load_tasks(summary["tasks"])[:2])
    main(["--run", str(run_dir), "--out", str(out), "--seeds", "0,1", "--tasks", str(two)])
    printed = capsys.readouterr().out
    assert "phase 1 · rollout 1/1: cached" in printed and "eval · RL seed 1: executed" in printed
    assert f"imitation-only baseline: {results_folder(out, two)}" in printed
    other = json.loads((results_folder(out, two) / "rl_seeds.json").read_text())
    assert other["pooled"]["all"]["tasks"] == 2 and other["tasks"] == str(two.resolve())
