"""The asynchronous env manager (the seed's TrajEnvManager, environment-level async rollout).

    plan_groups: N + R groups, group i → task (seed + i) mod #tasks, G episodes each
         │
         ▼
    every episode is its own asyncio task ──(≤ concurrency sandboxes at once)──► EpisodeRecord
         │   (the engine's batching front merges the generate calls of all live episodes)
         ▼
    on_finished(record)  ─► written at once (writer.py)
    a group is complete when all G episodes have finished, whatever their outcome;
    the first N complete groups are the batch ─► every other episode is cancelled
    (running stragglers and queued ones) and recorded as such.

A slow environment, a hung command or a long generation delays only its own
episode; the redundant R groups mean the batch never waits for the slowest
group (the long-tail problem the seed describes). Episodes already finished
(a resumed run) count as they are; only the missing ones are started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.rollout.episode import EpisodeIds, EpisodeRecord
from termrl.artifacts.tasks import Task

__all__ = ["EnvManager", "GroupPlan", "RolloutOutcome", "plan_groups", "select_complete_groups"]

EpisodeFn = Callable[[Task, EpisodeIds], Awaitable[EpisodeRecord]]


@dataclass(frozen=True)
class GroupPlan:
    index: int
    group_id: str
    task: Task
    anchor: int = 1
    """Every episode of the group starts at this chunk of the task's demonstration (1: from
    scratch), so the group's rewards are the (task, anchor) baseline of its advantages."""

    def episode_ids(self, group_size: int) -> list[EpisodeIds]:
        return [
            EpisodeIds(f"{self.group_id}-e{j:02d}", self.group_id, self.index, j, self.anchor)
            for j in range(group_size)
        ]


def plan_groups(
    tasks: Sequence[Task],
    count: int,
    *,
    seed: int,
    policy_version: int,
    anchor_for: Callable[[int, Task], int] | None = None,
) -> list[GroupPlan]:
    """The groups of a rollout, deterministic so that a rerun finds the same episode ids.

    Groups cycle over the tasks. ``anchor_for(visit, task)`` picks each group's anchor
    (``anchors.py``; ``visit`` counts the task's earlier groups); the anchor is part of
    the group id.
    """
    if not tasks:
        raise ValueError("no tasks to roll out on")
    plans = []
    for i in range(count):
        task = tasks[(seed + i) % len(tasks)]
        anchor = anchor_for(i // len(tasks), task) if anchor_for else 1
        suffix = f"-a{anchor}" if anchor > 1 else ""
        plans.append(GroupPlan(i, f"v{policy_version}-g{i:04d}{suffix}", task, anchor))
    return plans


def select_complete_groups(
    records: Sequence[EpisodeRecord], group_size: int, needed: int
) -> list[list[EpisodeRecord]]:
    """The first ``needed`` groups with all ``group_size`` episodes, in completion order."""
    by_group: dict[int, list[EpisodeRecord]] = {}
    for record in records:
        by_group.setdefault(record.ids.group_index, []).append(record)
    complete = [sorted(g, key=lambda r: r.ids.episode_index) for g in by_group.values()
                if len({r.ids.episode_index for r in g}) >= group_size]  # fmt: skip
    complete.sort(key=lambda g: (max(r.finished_at for r in g), g[0].ids.group_index))
    return complete[:needed]


@dataclass
class RolloutOutcome:
    kept: list[list[EpisodeRecord]]
    """The batch: ``groups`` complete groups in completion order."""
    cancelled: list[dict[str, Any]] = field(default_factory=list)
    """Stragglers cancelled once the batch was complete (state running or queued)."""
    finished_now: int = 0
    """Episodes finished by this run (a resumed run skips the ones on disk)."""
    wall_s: float = 0.0


class EnvManager:
    """Runs the missing episodes of a batch concurrently until ``needed`` groups are complete."""

    def __init__(
        self,
        plans: Sequence[GroupPlan],
        *,
        group_size: int,
        needed: int,
        concurrency: int,
        run_episode: EpisodeFn,
        on_finished: Callable[[EpisodeRecord], None],
        finished: Sequence[EpisodeRecord] = (),
    ) -> None:
        if needed > len(plans):
            raise ValueError(f"{needed} groups needed but only {len(plans)} planned")
        self.plans = list(plans)
        self.group_size = group_size
        self.needed = needed
        self.run_episode = run_episode
        self.on_finished = on_finished
        self._slots = asyncio.Semaphore(concurrency)
        self._records: list[EpisodeRecord] = list(finished)
        self._running: dict[str, float] = {}  # episode id -> start (monotonic)
        self._enough = asyncio.Event()

    def _complete(self) -> list[list[EpisodeRecord]]:
        return select_complete_groups(self._records, self.group_size, self.needed)

    async def _episode(self, plan: GroupPlan, ids: EpisodeIds) -> None:
        async with self._slots:
            if self._enough.is_set():
                return
            self._running[ids.episode_id] = time.monotonic()
            try:
                record = await self.run_episode(plan.task, ids)
            finally:
                self._running.pop(ids.episode_id, None)
        self.on_finished(record)
        self._records.append(record)
        if len(self._complete()) >= self.needed:
            self._enough.set()

    async def run(self) -> RolloutOutcome:
        started = time.monotonic()
        before = len(self._records)
        done = {r.ids.episode_id for r in self._records}
        if len(self._complete()) >= self.needed:
            return RolloutOutcome(self._complete(), wall_s=0.0)
        jobs: dict[asyncio.Task[None], tuple[GroupPlan, EpisodeIds]] = {}
        async with asyncio.TaskGroup() as group:
            for plan in self.plans:
                for ids in plan.episode_ids(self.group_size):
                    if ids.episode_id not in done:
                        jobs[group.create_task(self._episode(plan, ids))] = (plan, ids)
            waiter = group.create_task(self._enough.wait())
            # Wait on the pending jobs only: a finished job in the set would make every
            # wait return at once, and the spinning loop starves generation of the GIL.
            pending = set(jobs)
            while pending and not waiter.done():
                _, pending = await asyncio.wait({waiter, *pending}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(waiter)
            cancelled = self._cancel_stragglers(jobs)
            waiter.cancel()
        return RolloutOutcome(
            kept=self._complete(),
            cancelled=cancelled,
            finished_now=len(self._records) - before,
            wall_s=time.monotonic() - started,
        )

    def _cancel_stragglers(
        self, jobs: dict[asyncio.Task[None], tuple[GroupPlan, EpisodeIds]]
    ) -> list[dict[str, Any]]:
        now = time.monotonic()
        finished = {r.ids.episode_id for r in self._records}
        cancelled = []
        for job, (plan, ids) in jobs.items():
            if ids.episode_id in finished:
                continue
            began = self._running.get(ids.episode_id)
            cancelled.append({
                "episode_id": ids.episode_id,
                "group_id": ids.group_id,
                "task_id": plan.task.id,
                "state": "running" if began is not None else "queued",
                "elapsed_s": round(now - began, 3) if began is not None else 0.0,
            })  # fmt: skip
            job.cancel()
        return cancelled
