"""Synthetic but realistic metric histories for the health tests.

``healthy_run`` simulates what the stages record: each iteration rolls out
8 tasks × 4 episodes (per-task pass probabilities from 0 to 0.8, improving a
little every iteration), computes group-normalised advantages as the trainer
does, deals the episodes into optimizer steps of 4, and draws failed response
lengths and behaviour flags per episode. The numbers are noisy the way a small
batch is: the detectors must stay silent on them. The precursor series are a
healthy run with one sign injected.
"""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
from pathlib import Path
from typing import Any

from components.health.history import PATTERNS, IterationMetrics, TrainKnobs
from termrl.artifacts import write_rollout_metrics, write_train_metrics

__all__ = [
    "KNOBS",
    "healthy_run",
    "make_iteration",
    "negative_counts",
    "sink_advantage",
    "tail_lengths",
    "with_outcome",
    "with_patterns",
    "with_steps",
    "write_iteration",
]

KNOBS = TrainKnobs(mode="full", learning_rate=1e-5, eps_low=0.2, eps_high=0.2, negative_weight=1.0)
TASK_PASS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
PATTERN_RATE = {"loop": 0.12, "destructive": 0.01, "test_access": 0.02, "tampering": 0.0}
GROUP_SIZE = 4


def _advantages(rewards: list[float]) -> list[float]:
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / std if std > 0 else 0.0 for r in rewards]


def make_iteration(
    i: int, rng: random.Random, *, improvement: float = 0.02, **fields: Any
) -> IterationMetrics:
    """One simulated iteration; ``fields`` override IterationMetrics fields."""
    episodes: list[dict[str, Any]] = []
    for t, p in enumerate(TASK_PASS):
        p = min(p + improvement * i, 1.0)
        rewards = [float(rng.random() < p) for _ in range(GROUP_SIZE)]
        for reward, advantage in zip(rewards, _advantages(rewards), strict=True):
            flags = {name: rng.random() < rate for name, rate in PATTERN_RATE.items()}
            tokens = int(rng.lognormvariate(5.0, 0.5))  # ~150 response tokens, a long tail
            episodes.append(
                {
                    "task": f"task-{t}",
                    "reward": reward,
                    "advantage": advantage,
                    "tokens": tokens,
                    **flags,
                }
            )
    failed_max = max((e["tokens"] for e in episodes if not e["reward"]), default=0)
    order = rng.sample(episodes, len(episodes))
    train = []
    for s in range(0, len(order), 4):
        step = [e["advantage"] for e in order[s : s + 4]]
        train.append(
            {
                "step": s // 4 + 1,
                "mode": "full",
                "optim/lr": 1e-5,
                "advantage/positive": sum(a > 0 for a in step),
                "advantage/negative": sum(a < 0 for a in step),
                "advantage/mean": statistics.fmean(step),
                "data/failed_max_response_tokens": failed_max,
            }
        )
    n = len(episodes)
    rollout = {
        "rollout/episodes": float(n),
        "rollout/success_rate": sum(e["reward"] for e in episodes) / n,
        "rollout/reward_mean": sum(e["reward"] for e in episodes) / n,
        "rollout/max_failed_response_tokens": 20_000.0,
    }
    rollout.update({f"rollout/{p}_episodes": float(sum(e[p] for e in episodes)) for p in PATTERNS})
    tasks: dict[str, dict[str, float]] = {}
    for t in range(len(TASK_PASS)):
        mine = [e for e in episodes if e["task"] == f"task-{t}"]
        tasks[f"task-{t}"] = {
            "episodes": float(len(mine)),
            "success_rate": sum(e["reward"] for e in mine) / len(mine),
            **{f"{p}_episodes": float(sum(e[p] for e in mine)) for p in PATTERNS},
        }
    metrics = IterationMetrics(
        iteration=i,
        policy=f"ckpt-{i - 1}" if i else "start",
        checkpoint=f"ckpt-{i}",
        train=tuple(train),
        rollout=rollout,
        tasks=tasks,
        knobs=KNOBS,
    )
    return dataclasses.replace(metrics, **fields)


def healthy_run(iterations: int = 8, seed: int = 0) -> list[IterationMetrics]:
    """A run judged healthy throughout (every iteration but the last carries its verdict)."""
    rng = random.Random(seed)
    run = [make_iteration(i, rng) for i in range(iterations)]
    return [dataclasses.replace(h, verdict="healthy") for h in run[:-1]] + run[-1:]


def with_patterns(h: IterationMetrics, flagged: dict[str, dict[str, int]]) -> IterationMetrics:
    """``h`` with ``flagged[pattern][task]`` flagged episodes (every other task: none of that pattern)."""
    rollout = {
        **h.rollout,
        **{f"rollout/{p}_episodes": float(sum(on.values())) for p, on in flagged.items()},
    }
    tasks = {
        task: {**m, **{f"{p}_episodes": float(on.get(task, 0)) for p, on in flagged.items()}}
        for task, m in h.tasks.items()
    }
    return dataclasses.replace(h, rollout=rollout, tasks=tasks)


def with_outcome(
    h: IterationMetrics, passed: int, task_success: dict[str, float] | None = None
) -> IterationMetrics:
    """``h`` with ``passed`` of its episodes passing (and, optionally, some tasks' success rates)."""
    rate = passed / h.episodes
    rollout = {**h.rollout, "rollout/success_rate": rate, "rollout/reward_mean": rate}
    tasks = {
        task: {**m, "success_rate": (task_success or {}).get(task, m["success_rate"])}
        for task, m in h.tasks.items()
    }
    return dataclasses.replace(h, rollout=rollout, tasks=tasks)


def with_steps(h: IterationMetrics, columns: dict[str, list[Any]]) -> IterationMetrics:
    """``h`` with its train steps' ``columns`` replaced, one value per step."""
    rows = [{**r, **{k: v[i] for k, v in columns.items()}} for i, r in enumerate(h.train)]
    return dataclasses.replace(h, train=tuple(rows))


def sink_advantage(
    run: list[IterationMetrics], total: float, iterations: int = 3
) -> list[IterationMetrics]:
    """The last ``iterations`` iterations' signal steps shifted down linearly, by ``total`` at the end."""
    steps = sum(len(h.advantage_steps) for h in run[-iterations:])
    out, k = list(run[:-iterations]), 0
    for h in run[-iterations:]:
        rows = []
        for r in h.train:
            if r["advantage/positive"] + r["advantage/negative"]:
                r = {**r, "advantage/mean": r["advantage/mean"] - total * k / (steps - 1)}
                k += 1
            rows.append(r)
        out.append(dataclasses.replace(h, train=tuple(rows)))
    return out


def tail_lengths(
    run: list[IterationMetrics], lengths: list[int], passed: list[int]
) -> list[IterationMetrics]:
    """The last iterations with these longest failed lengths and these passed episodes."""
    head = run[: -len(lengths)]
    tail = [
        with_outcome(with_steps(h, {"data/failed_max_response_tokens": [n] * len(h.train)}), p)
        for h, n, p in zip(run[-len(lengths) :], lengths, passed, strict=True)
    ]
    return head + tail


def negative_counts(
    run: list[IterationMetrics], per_step: list[tuple[int, int]]
) -> list[IterationMetrics]:
    """The last iterations' steps with (positive, negative) counts per step."""
    head = run[: -len(per_step)]
    tail = [
        with_steps(
            h, {"advantage/positive": [p] * len(h.train), "advantage/negative": [n] * len(h.train)}
        )
        for h, (p, n) in zip(run[-len(per_step) :], per_step, strict=True)
    ]
    return head + tail


def write_iteration(
    root: Path, h: IterationMetrics, *, config_lr: float | None = None
) -> tuple[Path, Path]:
    """``h`` as the stages write it: a rollout metrics artifact (with the tool, command and alert
    rows the monitor adds) and a train output folder (train_metrics.parquet with the trainer's
    extra columns, training_state/state.json). Returns (rollout metrics path, train folder)."""
    rollout_path = root / f"rollout-{h.iteration}" / "rollout_metrics.parquet"
    rows = [
        {"scope": "global", "key": "all", "metric": k, "value": v} for k, v in h.rollout.items()
    ]
    rows.append(
        {
            "scope": "global",
            "key": "all",
            "metric": "rollout/episodes",
            "value": h.rollout["rollout/episodes"],
        }
    )
    rows += [
        {"scope": "task", "key": task, "metric": k, "value": v}
        for task, m in h.tasks.items()
        for k, v in m.items()
    ]
    rows += [
        {"scope": "tool", "key": "bash", "metric": "calls", "value": 40.0},
        {"scope": "command", "key": "ls", "metric": "count", "value": 12.0},
        {"scope": "alert", "key": "loop_rate", "metric": "value", "value": 0.3},
    ]
    write_rollout_metrics(rollout_path, rows)
    folder = root / f"train-{h.iteration}" / "checkpoint"
    steps = [
        {
            **r,
            "loss": 0.1,
            "optim/grad_norm": 0.5,
            "advantage/std": 0.9,
            "ratio/clip_fraction": 0.02,
            "data/episodes": 32,
            "ratio/mean": 1.0,
        }
        for r in h.train
    ]
    write_train_metrics(folder / "train_metrics.parquet", steps)
    config = {
        "trajectories": "t.parquet",
        "mode": h.knobs.mode,
        "eps_low": h.knobs.eps_low,
        "eps_high": h.knobs.eps_high,
        "negative_weight": h.knobs.negative_weight,
        "learning_rate": config_lr,
        "finetune": "lora",
        "epochs": 1,
    }
    (folder / "training_state").mkdir(parents=True)
    (folder / "training_state" / "state.json").write_text(
        json.dumps({"finetune": "lora", "config": config})
    )
    return rollout_path, folder
