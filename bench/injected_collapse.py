"""An injected collapse: does the health check catch it, and is the final policy no worse?

Starts from an earlier ``termrl run``'s imitation checkpoint and runs full-signal
RL rounds on that run's expert pool with the stage commands, exactly as the
curriculum chains them (rollout -> train -> health; the health report names the
next round's policy and options). One round trains at a learning rate far too
high for RL (the injected fault). The final policy (what the last health step
hands on) is evaluated on the run's held-out tasks beside the imitation policy,
and the comparison report carries the "Training health" section:

    python bench/injected_collapse.py --run runs/<name> --out /tmp/collapse
    python bench/injected_collapse.py --run runs/<name> --out /tmp/collapse --collapse-lr 0   # no fault

Prints one line per round (rollout success, verdict, action) and the two pass
rates. Rerun with the same ``--out`` to resume: a round with a health report is done. Minutes on a CPU: each round is one rollout (~2-3 min), one train step
(~1 min); the eval ~4 min.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from components.eval.report import compare_files
from components.health.report import read_report, to_html
from pipelines.local import RunRecord
from termrl.artifacts import read_rollout_metrics


def stage(name: str, *args: str) -> None:
    command = [sys.executable, "-m", f"components.{name}", *args]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def settings(options: dict[str, object]) -> list[str]:
    return [
        f"--set={key}={json.dumps(value) if not isinstance(value, str) else value}"
        for key, value in options.items()
    ]


def run_round(
    args: argparse.Namespace,
    r: int,
    folder: Path,
    pool: str,
    policy: str,
    previous: Path | None,
    options: dict,
    imitation: str,
) -> None:
    """Round ``r``: rollout of ``policy`` -> train -> health, as the curriculum chains them."""
    trajectories = folder / "trajectories.parquet"
    stage(
        "rollout",
        "--tasks",
        pool,
        "--model",
        policy,
        "--group-size",
        str(args.group_size),
        "--groups",
        str(args.groups),
        "--max-turns",
        "3",
        "--policy-version",
        str(r),
        "--out",
        str(trajectories),
        "--redundancy",
        "0",
        "--set=max_new_tokens=128",
        "--set=temperature=0.7",
        f"--set=seed={r}",
        *settings(options["rollout"]),
    )
    lr = args.collapse_lr if r == args.collapse_round and args.collapse_lr > 0 else args.lr
    shutil.rmtree(folder / "policy", ignore_errors=True)  # a train stopped half-way starts over
    stage(
        "train",
        "--trajectories",
        str(trajectories),
        "--model",
        policy,
        "--out",
        str(folder / "policy"),
        "--mode",
        "full",
        "--finetune",
        "full",
        "--lr",
        str(lr),
        "--seed",
        str(r),
        "--iteration",
        str(r),
        "--no-progress",
        "--set=temperature=0.7",
        "--set=keep_checkpoints=1",
        *settings(options["train"]),
    )
    stage(
        "health",
        "--rollout-metrics",
        str(folder / "rollout_metrics.parquet"),
        "--train",
        str(folder / "policy"),
        "--start-policy",
        imitation,
        "--out",
        str(folder / "health.json"),
        *(["--previous", str(previous)] if previous else []),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run", type=Path, required=True, help="a termrl run folder (run.json inside)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--collapse-round", type=int, default=1, help="the round whose train step is faulty"
    )
    parser.add_argument(
        "--collapse-lr", type=float, default=1e-3, help="its learning rate (0: no fault)"
    )
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    args = parser.parse_args()

    record = RunRecord.load(args.run)
    imitation = record.tasks["train"].outputs["checkpoint"]
    pool = record.tasks["curate"].outputs["expert_pool"]
    heldout = record.tasks["verify-2"].outputs["admitted"]
    imitation_results = record.tasks["evaluate-2"].outputs["results"]
    args.out.mkdir(parents=True, exist_ok=True)

    policy, previous, options = imitation, None, {"train": {}, "rollout": {}}
    lines = []
    for r in range(1, args.rounds + 1):
        folder = args.out / f"round-{r}"
        report = folder / "health.json"
        if not report.exists():  # a round whose health report exists is done (rerun to resume)
            run_round(args, r, folder, pool, policy, previous, options, imitation)
        data = json.loads(report.read_text())
        lr = json.loads((folder / "policy" / "training_state" / "state.json").read_text())[
            "config"
        ]["learning_rate"]
        success = {
            m["metric"]: m["value"]
            for m in read_rollout_metrics(folder / "rollout_metrics.parquet").to_pylist()
            if m["scope"] == "global"
        }["rollout/success_rate"]
        lines.append(
            f"round {r}: lr {lr:g}, rollout success {success:.0%} (of the policy it started from), "
            f"verdict {data['verdict']}{': ' + data['action'] if data['action'] else ''}"
        )
        print(lines[-1], flush=True)
        policy, previous, options = data["next_policy"], report, data["options"]

    results = args.out / "final.parquet"
    stage(
        "eval",
        "--tasks",
        heldout,
        "--model",
        policy,
        "--out",
        str(results),
        "--concurrency",
        "8",
        "--max-turns",
        "3",
        "--max-new-tokens",
        "128",
        "--temperature",
        "0",
        "--run-id",
        "final",
        "--no-progress",
    )
    values = compare_files(
        args.out / "report.html",
        [("base", imitation_results), ("final", results)],
        sections=[("Training health", to_html(read_report(previous)))],
    )
    print("\n".join(lines))
    print(f"final policy: {policy}")
    print(
        f"held-out pass rate: imitation {values['eval/base_pass_rate']:.1%}, "
        f"final {values['eval/final_pass_rate']:.1%}; report {args.out / 'report.html'}"
    )


if __name__ == "__main__":
    main()
