"""Imitation alone against imitation + phase-1 RL, over several seeds, on one run's cached stages.

What it measures: the points of held-out pass rate that the curriculum's phase-1 RL
adds to the imitation policy, as a paired difference pooled over seeds with a 95 %
interval (one run measures it once, with one seed: between +0 and +12 points so far,
issue 35). Only the RL part is repeated, on the run's own upstream artifacts (its
imitation checkpoint, its phase-1 pool with that pool's demonstrations as anchors,
the imitation pool's demonstrations, its held-out tasks), so only the seeds vary:

    python bench/rl_seeds.py --run runs/<name> --out /tmp/rl-seeds [--seeds 0,1,2] [--tasks T]

Per seed: the curriculum's phase-1 rounds (rollout -> train -> health -> the branch on
the verdict), built by its own step builders (``CurriculumSteps``) with the parameters
the run recorded in ``run.json`` (nothing is restated here), on kfp's local runner as
``termrl run`` runs them; then the policy the last round hands on is evaluated on the
held-out tasks. Round r of bench seed s rolls out and trains with seed ``1000·s + r``
(the curriculum's own round r uses r: seed 0 has the run's own seeds). The
imitation-only baseline is the run's own "eval · after imitation" (greedy, hence
deterministic: reused; evaluated here only if the run has none).

Rerun with the same ``--out`` to resume: a seed whose results file exists is skipped;
a seed stopped half-way reuses its finished stages (the kfp cache in ``--out/cache``).
Progress: one line per stage per seed.

Time on a CPU: a seed costs the run's phase-1 rounds plus one eval. On a default run's
folder, on the 2-core machine beside a test run: 12-16 min per seed (rollout ~4 min,
train 3-8 min, eval ~4 min), 41 min for three. Disk: a full checkpoint per seed and
round.

More tasks, a narrower interval: ``--tasks`` evaluates both policies on another admitted
task set (a ``termrl stage synthesize`` then ``termrl stage verify`` output, for example
a hundred easy tasks of the training families with a seed of their own) instead of the
run's held-out tasks. The interval is over tasks, so it narrows with the square root of
their number, while more seeds cannot narrow it once the seeds agree. The imitation
policy is then evaluated here too; the results go to ``--out/on-<file>-<hash>/``, and the
seeds' rollouts and trains come from ``--out``'s cache when they ran there before (only
the evals run).

Reading the result: per seed and slice (all tasks; the training families' tasks by
difficulty; the families left out of training), both pass rates with Wilson
intervals and RL − imitation; then the difference pooled over seeds
(``pooled_paired_difference``: per task the mean over seeds of RL − imitation, then
the mean over tasks with a paired t-interval). An interval above 0 says phase-1 RL
helps on tasks like these beyond the seeds' spread; one that spans 0 says these tasks
cannot tell RL from imitation alone. ``--out/rl_seeds.json`` holds every number.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PooledDifference",
    "RunInputs",
    "bench_pipeline",
    "main",
    "on_tasks",
    "pooled_paired_difference",
    "read_run",
    "report_lines",
    "results_folder",
    "round_seed",
    "run_stages",
    "slice_of",
    "summarize",
    "t_quantile_975",
    "task_rates",
]

Rows = Sequence[Mapping[str, Any]]

# --- statistics (pure) -----------------------------------------------------------------------


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` degrees of freedom (Abramowitz & Stegun 26.7.3-4:
    a finite series in θ = atan(t / sqrt(df)) for an integer df, so no special function is needed)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:  # sinθ · (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ...), df/2 terms
        term, total = 1.0, 1.0
        for k in range(df // 2 - 1):
            term *= (2 * k + 1) / (2 * k + 2) * c2
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    # 2/π · (θ + sinθ · (cosθ + 2/3 cos³θ + 2·4/(3·5) cos⁵θ + ...)), (df - 1)/2 terms
    term = total = math.cos(theta)
    for k in range((df - 3) // 2):
        term *= (2 * k + 2) / (2 * k + 3) * c2
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * total)


def t_quantile_975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (the half-width factor
    of a two-sided 95 % interval), by bisection on ``_t_two_sided``; 12.706 at df 1."""
    if df < 1:
        raise ValueError(f"a t quantile needs df >= 1, got {df}")
    low, high = 0.0, 100.0  # df 1 needs 12.7; the quantile falls with df
    while high - low > 1e-12:
        mid = (low + high) / 2
        low, high = (mid, high) if _t_two_sided(mid, df) < 0.95 else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class PooledDifference:
    """RL − imitation over tasks, each task's RL pass rate averaged over the seeds."""

    diff: float
    """Mean over tasks of d_i = mean over seeds of (RL_s pass rate − imitation pass rate) on task i."""
    low: float
    high: float
    """The 95 % paired t-interval over tasks: diff ± t(0.975, n − 1) · sd(d) / sqrt(n)."""
    tasks: int
    seeds: int
    gained: int
    """Tasks with d_i > 0 (RL passes more often than imitation, over the seeds)."""
    lost: int
    """Tasks with d_i < 0."""


def pooled_paired_difference(
    imitation: Mapping[str, float], seeds: Mapping[Any, Mapping[str, float]]
) -> PooledDifference:
    """The paired difference RL − imitation pooled over seeds, with its 95 % interval.

    ``imitation``: per-task pass rate of the imitation policy; ``seeds``: per seed, the per-task
    pass rates of the RL policy trained with that seed. Every seed must have evaluated exactly
    the imitation's tasks (a task missing somewhere is an error, never silently dropped: the
    pairs would differ between seeds).

    The unit is the task: d_i = mean_s(RL_s,i) − imitation_i, and the interval is the paired
    t-interval d̄ ± t(0.975, n − 1) · s_d / sqrt(n) over the n tasks. Why this interval: the
    held-out tasks are the sample whose population we want to speak about, and the seeds are
    averaged inside each task, so the spread of the d_i carries both the task-to-task and the
    seed-to-seed variation (a task RL solves under one seed only gives d_i = 1/k). The t
    quantile rather than the normal one keeps it honest at a few dozen tasks; it is
    deterministic (a bootstrap's percentile interval depends on its random draws and is too
    narrow at small n). When every d_i is equal (s_d = 0) the interval has width 0: read it with
    the per-task numbers. Fewer than 2 tasks have no spread to measure: an error.
    """
    if not seeds:
        raise ValueError("no seed results to pool")
    expected = set(imitation)
    problems = []
    for seed, rates in seeds.items():
        missing, extra = sorted(expected - set(rates)), sorted(set(rates) - expected)
        if missing or extra:
            problems.append(
                f"seed {seed}: tasks not evaluated {missing or 'none'}, "
                f"tasks the imitation eval lacks {extra or 'none'}"
            )
    if problems:
        raise ValueError(
            "every seed must be evaluated on the imitation eval's tasks: " + "; ".join(problems)
        )
    if len(expected) < 2:
        raise ValueError(f"a paired interval needs at least 2 tasks, got {len(expected)}")
    tasks = sorted(expected)
    diffs = [sum(rates[t] for rates in seeds.values()) / len(seeds) - imitation[t] for t in tasks]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return PooledDifference(
        diff=mean,
        low=mean - half,
        high=mean + half,
        tasks=n,
        seeds=len(seeds),
        gained=sum(d > 0 for d in diffs),
        lost=sum(d < 0 for d in diffs),
    )


def task_rates(rows: Rows) -> dict[str, float]:
    """Per task id, the share of its trials that passed (one trial each in the curriculum)."""
    from components.eval.summary import task_counts

    return {task: passed / n for task, (n, passed) in task_counts(rows).items()}


def slice_of(row: Mapping[str, Any], heldout_families: Sequence[str]) -> str:
    """The report's slice of an eval row: the families left out of training, or the training
    families' tasks of one difficulty (as the run's comparison table splits them)."""
    if row.get("family") in heldout_families:
        return "left-out families"
    return f"trained {row.get('difficulty') or 'unknown'}"


def round_seed(seed: int, version: int) -> int:
    """The rollout and train seed of round ``version`` of bench seed ``seed`` (the curriculum's
    own round uses ``version``: seed 0 shares it; rounds of different seeds never share one)."""
    return 1000 * seed + version


def _rate(rows: Rows) -> dict[str, float]:
    from components.eval.stats import pass_rate

    rate = pass_rate(sum(bool(r["passed"]) for r in rows), len(rows))
    return {"pass_rate": rate.rate, "low": rate.low, "high": rate.high, "trials": rate.n}


def summarize(
    imitation: Rows, seeds: Mapping[int, Rows], heldout_families: Sequence[str]
) -> dict[str, Any]:
    """Every number of the report: per seed and slice the two pass rates (Wilson intervals), and
    per slice the pooled paired difference (None for a slice of fewer than 2 tasks)."""
    names = ["all", *sorted({slice_of(r, heldout_families) for r in imitation})]

    def part(rows: Rows, name: str) -> list[Mapping[str, Any]]:
        return [r for r in rows if name == "all" or slice_of(r, heldout_families) == name]

    per_seed: dict[str, Any] = {}
    for seed, rows in seeds.items():
        per_seed[str(seed)] = {}
        for name in names:
            both = {"imitation": _rate(part(imitation, name)), "rl": _rate(part(rows, name))}
            both["diff"] = both["rl"]["pass_rate"] - both["imitation"]["pass_rate"]
            per_seed[str(seed)][name] = both
    everything = {seed: task_rates(rows) for seed, rows in seeds.items()}
    pooled: dict[str, Any] = {}
    for name in names:  # "all" first: it refuses seeds whose tasks differ from the imitation's
        base = task_rates(part(imitation, name))
        rl = (
            everything
            if name == "all"
            else {seed: {t: rates[t] for t in base} for seed, rates in everything.items()}
        )
        pooled[name] = (
            dataclasses.asdict(pooled_paired_difference(base, rl)) if len(base) >= 2 else None
        )
    return {"slices": names, "per_seed": per_seed, "pooled": pooled}


# --- the run's inputs --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInputs:
    """What the bench reads from a finished run: the artifacts its phase-1 rounds and its
    imitation eval read (as ``termrl rerun`` resolves them), and the parameters it ran with."""

    run_dir: Path
    recorded_shape: dict[str, Any]
    phase1_rounds: int
    arguments: dict[str, Any]
    imitation: str
    """The imitation checkpoint (phase 1's starting policy)."""
    train_pool: str
    anchors: str
    """The phase-1 pool's demonstrations (the rollout's anchors)."""
    demonstrations: str
    """The imitation pool's demonstrations (phase-1 train's imitation term)."""
    heldout: str
    imitation_results: str | None
    """The run's imitation eval results; None when the run has none on disk."""

    @property
    def heldout_families(self) -> list[str]:
        from components.eval.compare import family_list

        return family_list(str(self.arguments.get("heldout_families") or ""))


def _read_input(record: Any, spec: Any, display_name: str, name: str) -> str:
    """The run's artifact that input ``name`` of the task shown as ``display_name`` read (the
    output of the task that made it, as ``termrl rerun`` resolves one); an error if not on disk."""
    from pipelines.spec_tasks import leaf_tasks, output_sources
    from termrl.errors import ConfigError

    (leaf,) = [leaf for leaf in leaf_tasks(spec).values() if leaf.display_name == display_name]
    output = leaf.task.inputs.artifacts[name].task_output_artifact
    for task, key in output_sources(spec, output.producer_task, output.output_artifact_key):
        uri = record.tasks[task].outputs.get(key) if task in record.tasks else None
        if uri and Path(uri).exists():
            return uri
    raise ConfigError(
        f"{record.run_dir}: the input {name!r} of {display_name!r} is not on disk "
        f"(output {output.output_artifact_key!r} of {output.producer_task!r})"
    )


def read_run(run_dir: Path) -> RunInputs:
    """The inputs of ``run_dir``'s phase-1 round 1 and imitation eval (errors name what is missing)."""
    from pipelines.curriculum import EVAL_IMITATION, CurriculumShape, build_curriculum
    from pipelines.curriculum_steps import rounds
    from pipelines.local import RunRecord
    from termrl.errors import ConfigError

    record = RunRecord.load(run_dir)
    if record.pipeline != "termrl-curriculum":
        raise ConfigError(f"{run_dir} is a {record.pipeline} run, not a curriculum run")
    known = {f.name for f in dataclasses.fields(CurriculumShape)}  # the record has the runner's
    shape = CurriculumShape(**{k: v for k, v in record.shape.items() if k in known})
    if shape.phase1_iterations < 1:
        raise ConfigError(f"{run_dir} ran no phase-1 round: there is no RL to repeat")
    spec = build_curriculum(shape).pipeline_spec
    first = rounds(shape.phase1_iterations, 0)[0]
    rollout, train = first.name("rollout"), f"{first.name('train')} ({first.mode})"
    evaluated = [t for t in record.tasks.values() if t.display_name == EVAL_IMITATION]
    results = evaluated[0].outputs.get("results") if evaluated else None
    return RunInputs(
        run_dir=Path(run_dir),
        recorded_shape=dict(record.shape),
        phase1_rounds=shape.phase1_iterations,
        arguments=dict(record.arguments),
        imitation=_read_input(record, spec, rollout, "policy"),
        train_pool=_read_input(record, spec, rollout, "tasks"),
        anchors=_read_input(record, spec, rollout, "demonstrations"),
        demonstrations=_read_input(record, spec, train, "demonstrations"),
        heldout=_read_input(record, spec, EVAL_IMITATION, "tasks"),
        imitation_results=results if results and Path(results).exists() else None,
    )


def on_tasks(inputs: RunInputs, tasks: Path) -> RunInputs:
    """``inputs`` evaluating on the admitted task set ``tasks`` instead of the run's held-out
    tasks; the run's imitation eval measured other tasks, so the bench evaluates it again."""
    from termrl.artifacts import load_tasks
    from termrl.errors import ConfigError

    if not tasks.exists():
        raise ConfigError(f"--tasks {tasks}: no such file")
    try:
        count = len(load_tasks(tasks))
    except Exception as error:  # any unreadable file: say which and why
        raise ConfigError(f"--tasks {tasks}: not a task set ({error})") from error
    if count < 2:
        raise ConfigError(f"--tasks {tasks}: {count} task(s); a paired interval needs 2 or more")
    return dataclasses.replace(inputs, heldout=str(tasks.resolve()), imitation_results=None)


def results_folder(out: Path, tasks: Path | None) -> Path:
    """Where the results on ``tasks`` go: ``out`` itself for the run's held-out tasks, else a
    folder of their own inside it, named by the task set's file, so that the seeds' rollouts and
    trains are reused from ``out``'s cache and never paired with another task set's baseline."""
    if tasks is None:
        return out
    digest = hashlib.sha256(str(tasks.resolve()).encode()).hexdigest()[:8]
    return out / f"on-{tasks.stem}-{digest}"


# --- one seed: the curriculum's phase-1 rounds and an eval, on kfp's local runner --------------


def _seeded(component: Any, seed: int) -> Callable[..., Any]:
    """``component`` with its ``seed`` argument (the round's version) mapped to ``round_seed``."""

    def call(**kwargs: Any) -> Any:
        return component(**{**kwargs, "seed": round_seed(seed, kwargs["seed"])})

    return call


def bench_pipeline(inputs: RunInputs, shape: Any, seed: int | None) -> Any:
    """The pipeline of one seed (phase-1 rounds -> eval) or, with ``seed`` None, of the
    imitation eval alone; its parameters are the curriculum's (the run's values are passed)."""
    from kfp import dsl

    from pipelines.curriculum import EVAL_IMITATION, CurriculumParams, make_ops
    from pipelines.curriculum_steps import CurriculumSteps, RoundState, rounds
    from pipelines.parameters import pipeline_function
    from pipelines.presets import CPU_CURRICULUM

    ops = make_ops(shape.cpu_image, shape.gpu_image)
    if seed is not None:
        ops = dataclasses.replace(
            ops, rollout=_seeded(ops.rollout, seed), train=_seeded(ops.train, seed)
        )

    def imported(uri: str, kind: Any) -> Any:
        return dsl.importer(artifact_uri=uri, artifact_class=kind, reimport=False).output

    def body(p: Any) -> None:
        steps = CurriculumSteps(ops, shape, p)
        policy = imported(inputs.imitation, dsl.Model)
        heldout = imported(inputs.heldout, dsl.Dataset)
        if seed is None:
            steps.evaluate(heldout, policy, "imitation", EVAL_IMITATION)
            return
        pools = types.SimpleNamespace(
            outputs={"train_pool": imported(inputs.train_pool, dsl.Dataset)}
        )
        demos = imported(inputs.demonstrations, dsl.Dataset)
        anchors = imported(inputs.anchors, dsl.Dataset)
        state = RoundState(policy, policy, None, p.rollout_options, p.train_options)
        for rnd in rounds(inputs.phase1_rounds, 0):
            state = steps.rl_round(rnd, state, pools, demos, anchors)
        steps.evaluate(heldout, state.policy, f"seed-{seed}", _eval_name(seed))

    name = "termrl-rl-seeds"
    return dsl.pipeline(name=name, description="phase-1 RL from an imitation policy, one seed")(
        pipeline_function(
            CurriculumParams,
            body,
            name=name,
            summary="One seed of the RL seeds bench.",
            preset=CPU_CURRICULUM,
            given=shape.given(),
        )
    )


def _eval_name(seed: int | None) -> str:
    from pipelines.curriculum import EVAL_IMITATION

    return EVAL_IMITATION if seed is None else f"eval · RL seed {seed}"


def run_stages(inputs: RunInputs, seed: int | None, out: Path, cache: Path) -> Path:
    """Run one seed's pipeline (or the imitation eval's) with kfp's cache in ``cache`` and
    return its eval results file, copied to ``out/<seed-N|imitation>/results.parquet`` (the mark
    that the seed is done)."""
    from pipelines.curriculum import CurriculumShape
    from pipelines.docker_runner import RunnerChoice
    from pipelines.local import pipeline_defaults, run_pipeline_locally
    from pipelines.versioning import source_version

    label = "imitation" if seed is None else f"seed-{seed}"
    done = out / label / "results.parquet"
    if done.exists():
        return done
    code_version = source_version()  # this code's version keys the bench's cache, not the run's
    choice = RunnerChoice().or_recorded(inputs.recorded_shape).with_image(code_version)
    shape = CurriculumShape(inputs.phase1_rounds, 0, code_version=code_version, **choice.images())
    pipeline = bench_pipeline(inputs, shape, seed)
    declared = pipeline_defaults(pipeline)
    arguments = {k: v for k, v in inputs.arguments.items() if k in declared and v is not None}
    arguments["code_version"] = code_version
    stream = sys.stdout  # the runner captures stdout while it runs: bind today's

    def echo(line: str) -> None:
        stream.write(f"{label}: {line}\n")
        stream.flush()

    imported = (inputs.imitation, inputs.heldout, inputs.train_pool, inputs.anchors)
    with choice.kfp_runner(tuple(Path(uri) for uri in (*imported, inputs.demonstrations))) as kfp:
        record = run_pipeline_locally(
            pipeline,
            arguments,
            run_dir=out / label / "run",
            cache_dir=cache,
            shape={"rl_seeds_of": str(inputs.run_dir), **choice.shape_fields()},
            echo=echo,
            runner=kfp,
        )
    evaluated = [t for t in record.tasks.values() if t.display_name == _eval_name(seed)]
    if not record.ok or not evaluated or "results" not in evaluated[0].outputs:
        raise SystemExit(f"{label} failed: see {out / label / 'run' / 'run.log'}")
    partial = done.with_suffix(".partial")
    shutil.copyfile(evaluated[0].outputs["results"], partial)
    partial.replace(done)  # only a whole file marks the seed done
    return done


# --- the report ------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{100 * value:5.1f}"


def report_lines(summary: Mapping[str, Any]) -> list[str]:
    """The printed table: per seed and slice both pass rates and RL − imitation in points, then
    the pooled difference."""
    header = f"{'seed':<6} {'slice':<20} {'imitation % [95 % CI]':<24} {'RL % [95 % CI]':<24}"
    lines = [header + " RL − imitation"]
    for seed, slices in summary["per_seed"].items():
        for name in summary["slices"]:
            cells = [
                f"{_percent(r['pass_rate'])} [{_percent(r['low'])}, {_percent(r['high'])}]"
                for r in (slices[name]["imitation"], slices[name]["rl"])
            ]
            diff = f"{100 * slices[name]['diff']:+6.1f}"
            lines.append(f"{seed:<6} {name:<20} {cells[0]:<24} {cells[1]:<24} {diff}")
    lines += ["", "RL − imitation, pooled over seeds (points; paired t-interval over tasks):"]
    for name in summary["slices"]:
        d = summary["pooled"][name]
        if d is None:
            lines.append(f"  {name:<20} fewer than 2 tasks: no interval")
            continue
        lines.append(
            f"  {name:<20} {100 * d['diff']:+6.1f} [{100 * d['low']:+6.1f}, {100 * d['high']:+6.1f}]"
            f"  {d['tasks']} tasks x {d['seeds']} seeds, {d['gained']} gained, {d['lost']} lost"
        )
    return lines


def _rows(path: Path | str) -> list[dict[str, Any]]:
    from termrl.artifacts import read_eval_results

    return read_eval_results(path).to_pylist()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, required=True, help="a termrl run folder (run.json)")
    parser.add_argument("--out", type=Path, required=True, help="the bench's folder (resumable)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument(
        "--tasks",
        type=Path,
        help="an admitted task set to evaluate on instead of the run's held-out tasks",
    )
    args = parser.parse_args(argv)
    try:
        seeds = sorted({int(s) for s in args.seeds.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    if not seeds or min(seeds) < 0:
        parser.error("--seeds needs at least one seed, each >= 0")
    from termrl.errors import ConfigError

    try:
        inputs = read_run(args.run)
        if args.tasks is not None:
            inputs = on_tasks(inputs, args.tasks)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    for options in ("rollout_options", "train_options"):
        if "seed" in (inputs.arguments.get(options) or {}):
            raise SystemExit(f"the run's {options} set a seed, which would override the bench's")
    out, cache = results_folder(args.out, args.tasks), args.out / "cache"
    out.mkdir(parents=True, exist_ok=True)
    imitation = inputs.imitation_results or run_stages(inputs, None, out, cache)
    print(f"imitation-only baseline: {imitation}", flush=True)
    results = {seed: run_stages(inputs, seed, out, cache) for seed in seeds}
    summary = summarize(
        _rows(imitation), {s: _rows(p) for s, p in results.items()}, inputs.heldout_families
    )
    summary |= {
        "run": str(inputs.run_dir.resolve()),
        "seeds": seeds,
        "round_seeds": {
            str(s): [round_seed(s, r) for r in range(1, inputs.phase1_rounds + 1)] for s in seeds
        },
        "tasks": inputs.heldout,
        "imitation_results": str(imitation),
        "results": {str(s): str(p) for s, p in results.items()},
        "interval": "paired t-interval over tasks of the per-task mean over seeds",
    }
    (out / "rl_seeds.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(report_lines(summary)))
    print(f"every number: {out / 'rl_seeds.json'}")


if __name__ == "__main__":
    main()
