"""How well policies hold up when the same tasks are asked in other words (issue 35).

Every procedural task records its instruction in three voices (a request, a bug
report, a terse ticket: ``metadata["phrasings"]``). This bench takes a tasks
artifact (a run's admitted held-out tasks), keeps one slice of it (by default the
easy tasks of the families the run trained on), and makes one task per recorded
voice: the same environment and tests, that voice as the instruction. It
evaluates each policy on all of them with the curriculum's eval settings (greedy,
3 turns of 128 tokens) and prints, per policy, the pass rate in each voice and
over all; then, for each later policy, the paired difference over the first: the
unit is the task (its pass rate averaged over its voices), with a 95 % paired
t-interval over tasks (``bench/rl_seeds.py``'s).

    python bench/voices.py \\
        --tasks runs/RUN/artifacts/PIPELINE/verify-2/admitted \\
        --exclude-families config-edit,find-xargs,users-groups \\
        --model one-voice=runs/OLD/artifacts/PIPELINE/continue-from-4/next_policy \\
        --model every-voice=runs/RUN/artifacts/PIPELINE/continue-from-4/next_policy \\
        --out /tmp/voices

A policy whose results exist in ``--out`` is not evaluated again (rerun to resume).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.policy_eval import add_policy_options, evaluate, policies  # noqa: E402
from bench.rl_seeds import pooled_paired_difference  # noqa: E402
from components.demonstrate.stage import phrasings  # noqa: E402
from termrl.artifacts import load_tasks  # noqa: E402
from termrl.artifacts.eval_results import read_eval_results  # noqa: E402
from termrl.artifacts.tasks import Task, save_tasks  # noqa: E402

VOICE = "~"
"""Separates a task id from the voice in the id of its re-voiced copy."""


def revoiced(tasks: list[Task], difficulty: str, exclude: set[str]) -> list[Task]:
    """One copy of each task of the slice per voice it records (the voice's text as instruction):
    the voices the demonstrate stage replays (``phrasings``), the task's own under its style."""
    out = []
    for task in tasks:
        voices = phrasings(task, every_phrasing=True)
        if task.difficulty != difficulty or task.family in exclude or len(voices) < 2:
            continue
        for style, text in voices:
            style = style or str(task.metadata.get("phrasing", "own"))
            out.append(dataclasses.replace(task, id=f"{task.id}{VOICE}{style}", instruction=text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", required=True, help="a tasks artifact (the held-out tasks)")
    parser.add_argument("--difficulty", default="easy")
    parser.add_argument("--exclude-families", default="", help="comma-separated")
    add_policy_options(parser)
    args = parser.parse_args()
    models = policies(parser, args)

    exclude = {f for f in args.exclude_families.split(",") if f}
    tasks = revoiced(load_tasks(args.tasks), args.difficulty, exclude)
    originals = len({t.id.split(VOICE)[0] for t in tasks})
    if originals < 2:
        parser.error("fewer than 2 tasks of the slice record their phrasings")
    args.out.mkdir(parents=True, exist_ok=True)
    save_tasks(args.out / "tasks.parquet", tasks)
    print(f"{len(tasks)} tasks: {originals} {args.difficulty} tasks, each in its recorded voices")

    per_task: dict[str, dict[str, float]] = {}
    for label, model in models.items():
        rows = read_eval_results(evaluate(label, model, args.out / "tasks.parquet", args.out, args))
        by_voice: dict[str, list[bool]] = defaultdict(list)
        by_task: dict[str, list[bool]] = defaultdict(list)
        for row in rows.to_pylist():
            task, voice = row["task_id"].split(VOICE)
            by_voice[voice].append(bool(row["passed"]))
            by_task[task].append(bool(row["passed"]))
        per_task[label] = {t: sum(p) / len(p) for t, p in by_task.items()}
        voices = "  ".join(f"{v} {sum(p)}/{len(p)}" for v, p in sorted(by_voice.items()))
        passed = sum(sum(p) for p in by_voice.values())
        total = sum(len(p) for p in by_voice.values())
        print(f"{label:>14}: {passed}/{total} ({passed / total:.1%})   {voices}")
    first, *others = models
    for label in others:
        d = pooled_paired_difference(per_task[first], {label: per_task[label]})
        print(
            f"{label} − {first}: {100 * d.diff:+.1f} points [{100 * d.low:+.1f}, {100 * d.high:+.1f}] "
            f"over {d.tasks} tasks (each averaged over its voices); {d.gained} gained, {d.lost} lost"
        )


if __name__ == "__main__":
    main()
