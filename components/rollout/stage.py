"""The rollout stage, top to bottom: validate → set up → run → write artifacts → clean up.

    main(config)
      ├─ load tasks, leave quarantined ones out (cli-native: refuse multi-step ones), plan N + R
      │  groups, read finished episodes back (resume)
      ├─ engine (continuous CPU | vLLM) ─┬─ roll-managed: termrl's agent loop
      │                                  └─ cli-native: ModelProxy + reference agent CLI
      ├─ EnvManager: every episode async, first N complete groups kept, parts written as they end
      ├─ recoveries (``recoveries_per_task``): failed episodes' first errors, replayed with
      │  the expert's solution after them ─► demonstrations beside the episodes (recovery.py)
      ├─ behaviour flags per episode ─► shaping (penalties) and monitor counts
      ├─ mask & filter over the batch ─► trajectories.parquet (atomic)
      └─ monitor ─► rollout_metrics.parquet + printed summary and warnings

``rollout(config, tasks, engine)`` is the async core; tests, the benchmark and
the colocated round call it with their own engine (a scripted one for fault
injection), which they own: the rollout leaves it open.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.progress import artifact_path, progress_folder
from components.rollout.anchors import (
    anchor_picker,
    load_demonstrations,
    next_rollback_state,
    read_state,
    write_state,
)
from components.rollout.behaviour import behaviour_by_episode, episode_return
from components.rollout.cli_native import cli_native_step
from components.rollout.config import RolloutConfig
from components.rollout.env_manager import (
    EnvManager,
    complete_groups,
    informative,
    plan_groups,
    select_complete_groups,
)
from components.rollout.episode import AgentStep, SandboxEpisodeRunner, roll_managed_step
from components.rollout.mask_filter import MaskRules, apply_mask_filter
from components.rollout.monitor import MonitorThresholds, monitor_rows, summary_lines
from components.rollout.recovery import RecoveryBatch, plan_recoveries, run_recoveries
from components.rollout.writer import PartWriter
from termrl.artifacts import load_tasks, write_rollout_metrics
from termrl.artifacts.tasks import Task
from termrl.errors import ConfigError
from termrl.llm.batching import BatchingEngine
from termrl.llm.engine import Engine
from termrl.llm.engines import policy_engine, resolve_policy_engine
from termrl.sandbox.manager import SandboxManager
from termrl.settings import build_config

__all__ = [
    "RolloutSummary",
    "check_mode_runs",
    "fingerprint",
    "main",
    "make_engine",
    "run_for_kfp",
    "rollout",
    "without_quarantined",
]


@dataclass
class RolloutSummary:
    episodes: int
    rows: int
    finished_now: int
    cancelled: int
    dropped_groups: list[str]
    wall_sec: float
    lines: list[str]
    episode_rows: list[dict[str, Any]]
    """One row per kept episode (its first chunk's row): what rollback and reports read."""

    def headline_metrics(self) -> dict[str, float]:
        """The stage's headline numbers, for the Kubeflow UI's metrics panel."""
        return {
            "rollout/episodes": float(self.episodes),
            "rollout/finished_now": float(self.finished_now),  # fewer: a retry resumed the rest
            "rollout/rows": float(self.rows),
            "rollout/dropped_groups": float(len(self.dropped_groups)),
            "rollout/wall_sec": self.wall_sec,
        }


def main(config: RolloutConfig) -> RolloutSummary:
    """Run the stage as configured (the command line and the KFP component call this)."""
    config.validate()
    tasks = load_tasks(config.tasks)
    if not tasks:
        raise ConfigError(f"tasks artifact {config.tasks} holds no tasks")
    summary = asyncio.run(_rollout_and_close(config, tasks))
    for line in summary.lines:
        print(line)
    return summary


async def _rollout_and_close(config: RolloutConfig, tasks: list[Task]) -> RolloutSummary:
    async with make_engine(config) as engine:
        return await rollout(config, tasks, engine)


def run_for_kfp(
    inputs: dict[str, Any], outputs: dict[str, Any], parameters: dict[str, Any], options: Any
) -> None:
    """The KFP component's body: artifacts and parameters in, the stage run, every output written.

    ``inputs``: tasks, policy and the optional demonstrations and anchor_state artifacts;
    ``outputs``: trajectories, rollout_metrics, metrics and anchors. A parameter left None takes
    ``RolloutConfig``'s default; ``options`` (any field, JSON values) wins over ``parameters``.
    The stage insists on a ``.parquet`` name, which a KFP path lacks: the trajectories are written
    beside the artifact and moved onto it. The resume parts live where every attempt finds them.
    """

    out = Path(outputs["trajectories"].path + ".parquet")
    anchors = Path(outputs["anchors"].path)
    fields = dict(
        parameters,
        tasks=artifact_path(inputs["tasks"]),
        model=inputs["policy"].path,
        demonstrations=artifact_path(inputs.get("demonstrations")),
        anchor_state=artifact_path(inputs.get("anchor_state")),
        out=out,
        metrics_out=artifact_path(outputs["rollout_metrics"]),
        anchor_state_out=anchors,
        parts=progress_folder("rollout", outputs["trajectories"].uri),
    )
    summary = main(build_config(RolloutConfig, fields, options))
    if not anchors.exists():  # an output must exist; only rollback anchoring writes one
        anchors.write_text("{}")
    os.replace(out, outputs["trajectories"].path)
    values = summary.headline_metrics()
    outputs["metrics"].metadata.update(values)
    Path(outputs["metrics"].path).write_text(json.dumps(values, indent=1))


def make_engine(config: RolloutConfig, *, sleep_mode: bool = False) -> Engine:
    """The policy on the engine ``config.engine`` names (``termrl.llm.engines.POLICY_ENGINES``);
    ``sleep_mode``: a vLLM engine that can step aside for a colocated train step."""
    return policy_engine(
        config.model,
        engine=config.engine,
        max_batch_size=max(config.concurrency, 1),
        context_window=config.context_window,
        weights_dtype=config.weights_dtype,
        sleep_mode=sleep_mode,
    )


def without_quarantined(tasks: list[Task], quarantine: tuple[str, ...]) -> list[Task]:
    """The tasks this rollout may draw: ``tasks`` less the quarantined ids, in their order."""
    left_out = set(quarantine)
    kept = [t for t in tasks if t.id not in left_out]
    if not kept:
        raise ConfigError(
            f"quarantine leaves out every one of the {len(tasks)} task(s); nothing to roll out "
            "on (quarantine fewer tasks, or give a tasks artifact with others)"
        )
    return kept


def check_mode_runs(config: RolloutConfig, tasks: list[Task]) -> None:
    """Refuse, naming them all, the tasks the rollout's mode cannot run: cli-native's agent CLI
    takes one instruction, so no multi-step task (whose steps continue one conversation)."""
    if config.mode != "cli-native":
        return
    problems = [
        f"task {t.id} has {len(t.steps)} steps: cli-native mode cannot run a multi-step task "
        "(quarantine it, or roll out in roll-managed mode)"
        for t in tasks
        if t.steps
    ]
    if problems:
        raise ConfigError(problems)


def fingerprint(config: RolloutConfig, tasks: list[Task]) -> dict[str, Any]:
    """What must match for a rerun to resume the same rollout. ``tasks`` is the list after
    quarantine, so a changed quarantine changes the digest. The penalties are not in it: the
    parts hold raw episodes, and shaping is computed from them at the merge."""
    digest = hashlib.sha256("\0".join(t.id for t in tasks).encode()).hexdigest()[:16]
    keys = (
        "mode",
        "policy_version",
        "group_size",
        "groups",
        "redundancy",
        "dynamic_sampling",
        "seed",
        "max_turns",
        "anchoring",
        "temperature",  # recorded on every row: a resume must not mix two
        "weights_dtype",  # μ comes from these weights
    )
    return {
        "tasks": digest,
        "model": str(config.model),
        "engine": resolve_policy_engine(config.engine),  # and from this engine's kernels
        **{k: getattr(config, k) for k in keys},
    }


@contextlib.asynccontextmanager
async def _agent_step(
    config: RolloutConfig, engine: Engine, demonstrations: dict[str, list[str]]
) -> AsyncIterator[AgentStep]:
    # The caller owns ``engine`` (a colocated round keeps it across its train step): only the
    # batching front made here is closed here.
    front = (
        engine
        if engine.merges_requests
        else BatchingEngine(engine, max_batch_size=max(config.concurrency, 1), owns_engine=False)
    )
    try:
        if config.mode == "roll-managed":
            yield roll_managed_step(front, config.agent, demonstrations)
        else:
            async with cli_native_step(config, front) as step:
                yield step
    finally:
        if front is not engine:
            await front.aclose()


async def rollout(
    config: RolloutConfig,
    tasks: list[Task],
    engine: Engine,
    *,
    manager_factory: Callable[[], SandboxManager] | None = None,
) -> RolloutSummary:
    """Roll out one batch and write the trajectories and metrics artifacts."""
    started = time.monotonic()
    if config.recoveries_per_task > 0 and getattr(engine, "tokenizer", None) is None:
        raise ConfigError(
            f"recoveries_per_task needs a policy engine that owns a tokenizer, not {engine.name}"
        )
    drawable = without_quarantined(tasks, config.quarantine)
    check_mode_runs(config, drawable)
    writer = PartWriter(config.parts_dir, fingerprint(config, drawable))
    finished = writer.load()
    demonstrations = (
        load_demonstrations(config.demonstrations)
        if config.anchoring != "none" or config.recoveries_per_task > 0
        else {}
    )
    state = read_state(config.anchor_state)
    anchor_for = anchor_picker(config.anchoring, demonstrations, seed=config.seed, state=state)
    plans = plan_groups(
        drawable,
        config.groups_started,
        seed=config.seed,
        policy_version=config.policy_version,
        anchor_for=anchor_for,
    )
    make_manager = manager_factory or (
        lambda: SandboxManager(
            config.sandbox,
            max_sessions=config.concurrency,
        )
    )
    async with make_manager() as manager, _agent_step(config, engine, demonstrations) as step:
        runner = SandboxEpisodeRunner(
            manager,
            step,
            mode=config.mode,
            policy_version=config.policy_version,
            sandbox_lifetime_sec=config.sandbox_lifetime_sec,
            verifier_timeout_sec=config.verifier_timeout_sec,
        )
        outcome = await EnvManager(
            plans,
            group_size=config.group_size,
            needed=config.groups,
            concurrency=config.concurrency,
            run_episode=runner,
            on_finished=writer.write,
            finished=finished,
            informative=config.dynamic_sampling > 0,
            value=episode_return(config.penalties, config.loop_repeats),
        ).run()
        recoveries = None
        if config.recoveries_per_task > 0:  # roll-managed only (validate)
            planned = plan_recoveries(
                writer.load(), demonstrations, per_task=config.recoveries_per_task
            )
            recoveries = await run_recoveries(
                planned,
                {t.id: t for t in drawable},
                runner.sandboxes,
                engine.tokenizer,
                config.agent,
                policy_version=config.policy_version,
                verifier_timeout_sec=config.verifier_timeout_sec,
            )
    if outcome.cancelled:
        writer.record_cancelled(outcome.cancelled)
    summary = _finish(
        config,
        writer,
        time.monotonic() - started,
        outcome.finished_now,
        quarantined=len(tasks) - len(drawable),
        recoveries=recoveries,
    )
    if config.anchoring == "rollback":
        scored = [
            (r["task_id"], r["anchor"] or 1, r["success"])
            for r in summary.episode_rows
            if not r["placeholder"]
        ]
        write_state(
            config.anchor_state_path,
            next_rollback_state(state, scored, demonstrations, threshold=config.rollback_threshold),
        )
    return summary


def _finish(
    config: RolloutConfig,
    writer: PartWriter,
    wall_sec: float,
    finished_now: int,
    *,
    quarantined: int,
    recoveries: RecoveryBatch | None = None,
) -> RolloutSummary:
    """Mask & filter the batch on disk, write both artifacts (the recoveries' rows after the
    episodes'), summarise."""
    finished = writer.load()
    value = episode_return(config.penalties, config.loop_repeats)
    kept = select_complete_groups(
        finished,
        config.group_size,
        config.groups,
        informative_first=config.dynamic_sampling > 0,
        value=value,
    )
    rules = MaskRules(
        config.drop_ratio_limit, config.max_failed_response_tokens, config.mask_max_turns
    )
    behaviour = behaviour_by_episode(kept, config.loop_repeats)
    shaping = {
        episode_id: config.penalties.shaping(flags) for episode_id, flags in behaviour.items()
    }
    result = apply_mask_filter(kept, rules, shaping)
    cancelled = writer.cancelled()
    episodes = sum(len(g) for g in kept)
    extra = {f"rollout/{k}": v for k, v in result.stats.items()}
    extra["rollout/stragglers_cancelled"] = float(sum(c["state"] == "running" for c in cancelled))
    extra["rollout/queued_cancelled"] = float(sum(c["state"] == "queued" for c in cancelled))
    extra["rollout/skipped_uniform_task"] = float(sum(c["state"] == "skipped" for c in cancelled))
    extra["rollout/groups_finished"] = float(len(complete_groups(finished, config.group_size)))
    extra["rollout/groups_informative"] = float(sum(informative(g, value) for g in kept))
    extra["rollout/quarantined_tasks"] = float(quarantined)
    if recoveries is not None:
        extra["rollout/recoveries"] = float(recoveries.kept)
        extra["rollout/recoveries_dropped"] = float(sum(recoveries.dropped.values()))
    extra["rollout/max_failed_response_tokens"] = float(
        config.max_failed_response_tokens
    )  # the mask in force
    extra["rollout/wall_sec"] = wall_sec
    extra["rollout/episodes_per_sec"] = finished_now / wall_sec if wall_sec > 0 else 0.0
    thresholds = MonitorThresholds(
        destructive_rate=config.warn_destructive_rate,
        test_access_rate=config.warn_test_access_rate,
        loop_rate=config.warn_loop_rate,
        failure_rate=config.warn_failure_rate,
    )
    metrics = monitor_rows(kept, thresholds, behaviour, extra_global=extra, cancelled=cancelled)
    write_rollout_metrics(config.metrics_path, metrics)
    recovered = recoveries.rows if recoveries is not None else []
    writer.merge(
        result.rows + recovered,
        config.out,
        temperature=config.temperature,
        keep_parts=config.keep_parts,
    )
    return RolloutSummary(
        episodes=episodes,
        rows=len(result.rows) + len(recovered),
        finished_now=finished_now,
        cancelled=len(cancelled),
        dropped_groups=result.dropped_groups,
        wall_sec=wall_sec,
        lines=summary_lines(metrics) + ([recoveries.line()] if recoveries is not None else []),
        episode_rows=[r for r in result.rows if r["chunk_index"] == 0],
    )
