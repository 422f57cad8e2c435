"""The asynchronous env manager (the seed's TrajEnvManager, environment-level async rollout).

    plan_groups: N + R groups, group i → task (seed + i) mod #tasks, G episodes each
         │
         ▼
    every episode is its own asyncio task ──(≤ concurrency sandboxes at once)──► RolloutEpisode
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

Dynamic sampling (DAPO's answer to groups without signal): a group whose
episodes all earned the same reward has zero advantage everywhere and teaches
nothing. With ``informative=True`` only groups whose returns (outcome reward
plus behaviour shaping, which is what train's advantages see) differ count
towards the batch, extra planned groups replace the uniform ones, and a group
not yet started on a task that already gave a uniform group is skipped: a
small policy's success on a task is close to all or nothing, so a second
group there would most likely be uniform again. When the plan runs out, the
batch is topped up with uniform groups so its shape holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.rollout.episode import EpisodeIds, RolloutEpisode
from termrl.artifacts.tasks import Task

__all__ = [
    "EnvManager",
    "GroupPlan",
    "RolloutOutcome",
    "complete_groups",
    "informative",
    "plan_groups",
    "select_complete_groups",
]

EpisodeFn = Callable[[Task, EpisodeIds], Awaitable[RolloutEpisode]]


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


EpisodeValue = Callable[[RolloutEpisode], float]
"""An episode's return as train sees it (``behaviour.episode_return``: reward plus shaping)."""


def _reward(record: RolloutEpisode) -> float:
    return record.reward


def informative(group: Sequence[RolloutEpisode], value: EpisodeValue = _reward) -> bool:
    """The group's returns differ, so its advantages are not all zero. With behaviour shaping
    on, two passes of which one looped differ too: ``value`` gives the return train uses."""
    return len({value(r) for r in group}) > 1


def complete_groups(
    records: Sequence[RolloutEpisode], group_size: int
) -> list[list[RolloutEpisode]]:
    """Every group with all ``group_size`` episodes, in completion order."""
    by_group: dict[int, list[RolloutEpisode]] = {}
    for record in records:
        by_group.setdefault(record.ids.group_index, []).append(record)
    complete = [
        sorted(g, key=lambda r: r.ids.episode_index)
        for g in by_group.values()
        if len({r.ids.episode_index for r in g}) >= group_size
    ]
    complete.sort(key=lambda g: (max(r.finished_at for r in g), g[0].ids.group_index))
    return complete


def select_complete_groups(
    records: Sequence[RolloutEpisode],
    group_size: int,
    needed: int,
    *,
    informative_first: bool = False,
    value: EpisodeValue = _reward,
) -> list[list[RolloutEpisode]]:
    """The batch: the first ``needed`` complete groups in completion order; with
    ``informative_first`` the groups whose returns (``value``) differ come before the uniform ones."""
    complete = complete_groups(records, group_size)
    if informative_first:
        complete = [g for g in complete if informative(g, value)] + [
            g for g in complete if not informative(g, value)
        ]
    return complete[:needed]


@dataclass
class RolloutOutcome:
    kept: list[list[RolloutEpisode]]
    """The batch: ``groups`` complete groups in completion order."""
    cancelled: list[dict[str, Any]] = field(default_factory=list)
    """Stragglers cancelled once the batch was complete (state running or queued)."""
    finished_now: int = 0
    """Episodes finished by this run (a resumed run skips the ones on disk)."""
    wall_sec: float = 0.0


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
        on_finished: Callable[[RolloutEpisode], None],
        finished: Sequence[RolloutEpisode] = (),
        informative: bool = False,
        value: EpisodeValue = _reward,
    ) -> None:
        if needed > len(plans):
            raise ValueError(f"{needed} groups needed but only {len(plans)} planned")
        self.plans = list(plans)
        self.group_size = group_size
        self.needed = needed
        self.run_episode = run_episode
        self.on_finished = on_finished
        self._slots = asyncio.Semaphore(concurrency)
        self._records: list[RolloutEpisode] = list(finished)
        self.informative = informative
        self.value = value
        self._running: dict[str, float] = {}  # episode id -> start (monotonic)
        self._started_groups = {r.ids.group_index for r in finished}
        self._skipped: set[str] = set()
        self._enough = asyncio.Event()

    def _complete(self) -> list[list[RolloutEpisode]]:
        return select_complete_groups(
            self._records,
            self.group_size,
            self.needed,
            informative_first=self.informative,
            value=self.value,
        )

    def _has_enough(self) -> bool:
        groups = self._complete()
        return len(groups) >= self.needed and (
            not self.informative or informative(groups[-1], self.value)
        )

    def _uniform_tasks(self) -> set[str]:
        return {
            g[0].task_id
            for g in complete_groups(self._records, self.group_size)
            if not informative(g, self.value)
        }

    async def _episode(self, plan: GroupPlan, ids: EpisodeIds) -> None:
        async with self._slots:
            if self._enough.is_set():
                return
            if (
                self.informative
                and plan.index not in self._started_groups
                and plan.task.id in self._uniform_tasks()
            ):
                self._skipped.add(ids.episode_id)
                return
            self._started_groups.add(plan.index)
            self._running[ids.episode_id] = time.monotonic()
            try:
                record = await self.run_episode(plan.task, ids)
            finally:
                self._running.pop(ids.episode_id, None)
        self.on_finished(record)
        self._records.append(record)
        if self._has_enough():
            self._enough.set()

    async def run(self) -> RolloutOutcome:
        started = time.monotonic()
        before = len(self._records)
        done = {r.ids.episode_id for r in self._records}
        if self._has_enough():
            return RolloutOutcome(self._complete(), wall_sec=0.0)
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
                _, pending = await asyncio.wait(
                    {waiter, *pending}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(waiter)
            cancelled = self._cancel_stragglers(jobs)
            waiter.cancel()
        return RolloutOutcome(
            kept=self._complete(),
            cancelled=cancelled,
            finished_now=len(self._records) - before,
            wall_sec=time.monotonic() - started,
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
            state = (
                "running"
                if began is not None
                else "skipped"
                if ids.episode_id in self._skipped
                else "queued"
            )
            cancelled.append(
                {
                    "episode_id": ids.episode_id,
                    "group_id": ids.group_id,
                    "task_id": plan.task.id,
                    "state": state,
                    "elapsed_sec": round(now - began, 3) if began is not None else 0.0,
                }
            )
            job.cancel()
        return cancelled
