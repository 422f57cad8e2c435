"""A colocated RL round: rollout and train in one process, on one device, top to bottom.

    run_round(rollout_config, train_config, iterations=1)
      ├─ validate both (the trajectories the train step reads are this round's own)
      ├─ the rollout's engine, able to step aside (``termrl.llm.colocate``)
      └─ each iteration:
           rollout (components.rollout.stage.rollout) ─► trajectories + rollout metrics
           engine ─► to train    vLLM sleeps on CUDA; any other engine is closed
           train (components.train.trainer.train)    ─► checkpoint folder
           engine ─► to rollout  vLLM wakes with the checkpoint's weights; any other is rebuilt
                                 (only when another iteration follows)

The curriculum's ``colocate`` placement runs one such round per RL round: one
GPU pod instead of a rollout pod and a train pod, the GPU handed between the two
phases instead of each pod loading the policy again. It lives beside the glue
steps, not among the stages: it is a placement of two stages, which call each
other nowhere else (``tests/test_layers.py``); its KFP wrapper is
``pipelines/colocated_component.py``. With ``iterations`` > 1 the
pod goes on, each iteration a policy version later; the configured output paths
hold the last iteration's artifacts, earlier ones are kept under
``<train out>.iterations/<k>/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.progress import artifact_path, move_onto, progress_folder
from components.rollout.config import RolloutConfig
from components.rollout.stage import RolloutSummary, make_engine, rollout
from components.train.config import TrainConfig
from components.train.trainer import TrainResult, flat_metrics, train
from termrl.artifacts import load_tasks
from termrl.artifacts.tasks import Task
from termrl.errors import ConfigError
from termrl.llm.colocate import ColocatedPolicy, Switch
from termrl.settings import build_config

__all__ = ["ColocatedSummary", "run_for_kfp", "run_round"]


@dataclass
class ColocatedSummary:
    rollouts: list[RolloutSummary] = field(default_factory=list)
    trainings: list[TrainResult] = field(default_factory=list)
    switches: list[Switch] = field(default_factory=list)

    def headline_metrics(self) -> dict[str, float]:
        """The last iteration's rollout and train numbers, and the switches' time and memory."""
        values = {**self.rollouts[-1].headline_metrics(), **flat_metrics(self.trainings[-1])}
        for direction in ("to train", "to rollout"):
            done = [s for s in self.switches if s.direction == direction]
            if done:
                key = direction.replace(" ", "_")
                values[f"colocate/{key}_sec"] = sum(s.seconds for s in done) / len(done)
                values[f"colocate/{key}_freed_mib"] = sum(s.freed for s in done) / len(done) / 2**20
        return values


def run_round(
    rollout_config: RolloutConfig, train_config: TrainConfig, *, iterations: int = 1
) -> ColocatedSummary:
    """Run ``iterations`` rollout -> train iterations in this process, sharing one device."""
    _validate(rollout_config, train_config, iterations)
    tasks = load_tasks(rollout_config.tasks)
    if not tasks:
        raise ConfigError(f"tasks artifact {rollout_config.tasks} holds no tasks")
    return asyncio.run(_iterate(rollout_config, train_config, tasks, iterations))


def _validate(rollout_config: RolloutConfig, train_config: TrainConfig, iterations: int) -> None:
    problems = [] if iterations >= 1 else [f"iterations={iterations} must be >= 1"]
    # The train step reads the trajectories this round writes.
    reads = dataclasses.replace(train_config, trajectories=str(rollout_config.out))
    for config in (rollout_config, reads):
        try:
            config.validate()
        except ConfigError as exc:
            problems += exc.problems
    problems = [p for p in problems if not p.startswith("trajectories file ")]
    if problems:
        raise ConfigError(problems)


async def _iterate(
    rollout_config: RolloutConfig, train_config: TrainConfig, tasks: list[Task], iterations: int
) -> ColocatedSummary:
    summary = ColocatedSummary()

    def build(model: str | None):
        return make_engine(dataclasses.replace(rollout_config, model=model), sleep_mode=True)

    policy = ColocatedPolicy(build, rollout_config.model)
    try:
        for k in range(iterations):
            rolled, trained = _iteration_configs(
                rollout_config, train_config, k, last=k == iterations - 1, model=policy.model
            )
            summary.rollouts.append(await rollout(rolled, tasks, policy.engine))
            for line in summary.rollouts[-1].lines:
                print(line)
            summary.switches.append(await policy.to_train())
            summary.trainings.append(await asyncio.to_thread(train, trained))
            if k < iterations - 1:
                summary.switches.append(await policy.to_rollout(trained.out))
    finally:
        await policy.aclose()
    return summary


def _iteration_configs(
    rollout_config: RolloutConfig,
    train_config: TrainConfig,
    k: int,
    *,
    last: bool,
    model: str | None,
) -> tuple[RolloutConfig, TrainConfig]:
    """Iteration ``k``'s two configs: a policy version (and seed) later than the one before,
    the last iteration writing to the configured outputs, earlier ones beside them."""
    rolled = dataclasses.replace(
        rollout_config,
        model=model,
        policy_version=rollout_config.policy_version + k,
        seed=rollout_config.seed + k,
    )
    trained_out = Path(train_config.out)
    if not last:
        work = _iteration_dir(train_config, k)
        rolled = dataclasses.replace(
            rolled,
            out=work / "trajectories.parquet",
            metrics_out=work / "rollout_metrics.parquet",
            anchor_state_out=work / "anchors.json",
            parts=rolled.parts_dir.with_name(f"{rolled.parts_dir.name}.{k}"),
        )
        trained_out = work / "checkpoint"
    if k > 0 and rollout_config.anchoring == "rollback":
        previous = _iteration_dir(train_config, k - 1) / "anchors.json"  # never the last's
        rolled = dataclasses.replace(rolled, anchor_state=previous)
    trained = dataclasses.replace(
        train_config,
        trajectories=str(rolled.out),
        model=model or train_config.model,
        out=str(trained_out),
        iteration=train_config.iteration + k,
        seed=train_config.seed + k,
    )
    return rolled, trained


def _iteration_dir(train_config: TrainConfig, k: int) -> Path:
    """Where iteration ``k`` (not the last) keeps its trajectories, metrics and checkpoint."""
    out = Path(train_config.out)
    return out.with_name(out.name + ".iterations") / str(k)


def run_for_kfp(
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    rollout_parameters: dict[str, Any],
    train_parameters: dict[str, Any],
    rollout_options: Any,
    train_options: Any,
) -> None:
    """The KFP component's body: one round, each output written (the rollout's and train's).

    ``inputs``: tasks, policy and the optional demonstrations (the train step's imitation term),
    rollout_demonstrations and anchor_state (the rollout's anchors); ``outputs``: trajectories,
    rollout_metrics, anchors, checkpoint and metrics. Resume state (the rollout's finished
    episodes, the trainer's step checkpoints) lives where every attempt of the task finds it.
    """

    trajectories = Path(outputs["trajectories"].path + ".parquet")
    anchors = Path(outputs["anchors"].path)
    work = progress_folder("colocated", outputs["checkpoint"].uri)
    rollout_config = build_config(
        RolloutConfig,
        dict(
            rollout_parameters,
            tasks=artifact_path(inputs["tasks"]),
            model=inputs["policy"].path,
            demonstrations=artifact_path(inputs.get("rollout_demonstrations")),
            anchor_state=artifact_path(inputs.get("anchor_state")),
            out=trajectories,
            metrics_out=artifact_path(outputs["rollout_metrics"]),
            anchor_state_out=anchors,
            parts=progress_folder("colocated-rollout", outputs["trajectories"].uri),
        ),
        rollout_options,
    )
    demonstrations = inputs.get("demonstrations")
    train_config = build_config(
        TrainConfig,
        dict(
            train_parameters,
            trajectories=str(trajectories),
            model=inputs["policy"].path,
            out=str(work),
            resume=True,
            demonstrations=demonstrations.path if demonstrations is not None else None,
            keep_checkpoints=1,
            progress=False,
        ),
        train_options,
    )
    summary = run_round(rollout_config, train_config)
    if not anchors.exists():  # an output must exist; only rollback anchoring writes one
        anchors.write_text("{}")
    os.replace(trajectories, outputs["trajectories"].path)
    move_onto(work, outputs["checkpoint"].path)
    values = summary.headline_metrics()
    outputs["metrics"].metadata.update(values)
    Path(outputs["metrics"].path).write_text(json.dumps(values, indent=1))
