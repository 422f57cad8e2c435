"""How far a policy reaches: easy tasks written by others, in their words and file layouts (issue 35).

The held-out tasks of a run come from the same generators as its training tasks, so
they measure how well a policy fills in the templates it was trained on. The tasks in
``bench/reach/tasks/`` were written for this bench, as Harbor task folders, by authors
who had not read the generators (``components/synthesize/``): everyday one- or
two-command chores (text, files and folders, data and developer chores) asked as
people ask them, in places such as ``/srv``, ``/home/user`` or ``/var/log``, with the
traps real files have. A policy never trains on them; they are a public stand-in for
the private set of outside tasks the issue names, not that set.

The bench imports the folders, evaluates each policy with the curriculum's eval
settings (greedy, 3 turns of 128 tokens) and prints, per policy,
the pass rate with its 95 % Wilson interval over all tasks and by area (the folder
name's prefix: ``txt``, ``fs``, ``dev``); then, for each later policy, the paired
difference over the first (``components.eval.stats.paired_difference``).

    python bench/reach.py \\
        --model final=runs/RUN/artifacts/PIPELINE/train-3/checkpoint \\
        --model imitation=runs/RUN/artifacts/PIPELINE/train/checkpoint \\
        --out /tmp/reach

A policy whose results exist in ``--out`` is not evaluated again (rerun to resume).
``tests/bench/test_reach.py`` checks that every task's solution passes its tests and
that doing nothing fails them.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.policy_eval import add_policy_options, evaluate, policies  # noqa: E402
from components.eval.stats import paired_difference, pass_rate  # noqa: E402
from termrl.artifacts.eval_results import read_eval_results  # noqa: E402
from termrl.artifacts.tasks import Task, save_tasks  # noqa: E402
from termrl.taskfolders import import_task_folders  # noqa: E402

TASKS = ROOT / "bench" / "reach" / "tasks"
"""The bench's task folders, one per task, named AREA-NAME."""


def reach_tasks(folder: Path = TASKS) -> list[Task]:
    """The bench's tasks, imported from their folders; any folder that does not import is an error."""
    report = import_task_folders([folder])
    if report.errors:
        raise SystemExit("invalid task folders:\n  " + "\n  ".join(map(str, report.errors)))
    return sorted(report.tasks, key=lambda t: t.id)


def area(task_id: str) -> str:
    """A task's area: its folder name's prefix (``txt-count-errors`` -> ``txt``)."""
    return task_id.split("-", 1)[0]


def summary_line(label: str, passed: dict[str, bool]) -> str:
    """``label: 7/30 (23.3 % [11.8, 40.9])   dev 2/10  fs 1/10  txt 4/10``"""
    rate = pass_rate(sum(passed.values()), len(passed))
    by_area: dict[str, list[bool]] = defaultdict(list)
    for task_id, ok in passed.items():
        by_area[area(task_id)].append(ok)
    areas = "  ".join(f"{a} {sum(p)}/{len(p)}" for a, p in sorted(by_area.items()))
    return (
        f"{label:>14}: {rate.passed}/{rate.n} ({100 * rate.rate:.1f} % "
        f"[{100 * rate.low:.1f}, {100 * rate.high:.1f}])   {areas}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=Path, default=TASKS, help="a folder of task folders")
    add_policy_options(parser)
    args = parser.parse_args()
    models = policies(parser, args)

    tasks = reach_tasks(args.tasks)
    args.out.mkdir(parents=True, exist_ok=True)
    save_tasks(args.out / "tasks.parquet", tasks)
    print(f"{len(tasks)} tasks from {args.tasks}")

    passed: dict[str, dict[str, bool]] = {}
    for label, model in models.items():
        rows = read_eval_results(evaluate(label, model, args.out / "tasks.parquet", args.out, args))
        passed[label] = {r["task_id"]: bool(r["passed"]) for r in rows.to_pylist()}
        print(summary_line(label, passed[label]))
        solved = [t for t, ok in sorted(passed[label].items()) if ok]
        print(f"{'':>16}passed: {', '.join(solved) or 'none'}")
    first, *others = models
    for label in others:
        d = paired_difference(
            {t: float(ok) for t, ok in passed[first].items()},
            {t: float(ok) for t, ok in passed[label].items()},
        )
        if d is None:
            print(f"{label} − {first}: no task in both")
            continue
        print(
            f"{label} − {first}: {100 * d.diff:+.1f} points [{100 * d.low:+.1f}, {100 * d.high:+.1f}] "
            f"over {d.tasks} tasks; {d.gained} gained, {d.lost} lost"
        )


if __name__ == "__main__":
    main()
