"""The env manager's scheduling with an in-process episode function (timing-free asserts).

The real sandboxes are exercised in test_stage.py; here an episode is a coroutine
that waits on an event, so the order of completion is set by the test.
"""

from __future__ import annotations

import asyncio

from components.rollout.env_manager import EnvManager, plan_groups, select_complete_groups
from components.rollout.episode import EpisodeIds, RolloutEpisode
from termrl.artifacts import Task

TASKS = [Task(id="a", instruction="a"), Task(id="b", instruction="b")]


class Episodes:
    """Episodes finish when released; records how many ran at once."""

    def __init__(self, slow_groups: set[int]) -> None:
        self.slow_groups = slow_groups
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.running = self.max_running = 0

    async def __call__(self, task: Task, ids: EpisodeIds) -> RolloutEpisode:
        self.started.append(ids.episode_id)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if ids.group_index in self.slow_groups:
                await self.release.wait()  # a straggler: never released in these tests
            await asyncio.sleep(0.001 * ids.group_index)
        finally:
            self.running -= 1
        return RolloutEpisode(
            ids=ids,
            task_id=task.id,
            policy_version=0,
            mode="roll-managed",
            finished_at=asyncio.get_running_loop().time(),
        )


def test_groups_cycle_over_tasks_deterministically():
    plans = plan_groups(TASKS, 3, seed=1, policy_version=7)
    assert [(p.group_id, p.task.id) for p in plans] == [
        ("v7-g0000", "b"),
        ("v7-g0001", "a"),
        ("v7-g0002", "b"),
    ]
    assert [i.episode_id for i in plans[0].episode_ids(2)] == ["v7-g0000-e00", "v7-g0000-e01"]


async def test_redundant_groups_cut_the_straggler_and_record_it():
    episodes = Episodes(slow_groups={0})
    written: list[RolloutEpisode] = []
    plans = plan_groups(TASKS, 3, seed=0, policy_version=0)  # N=2 + R=1
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=2,
        concurrency=6,
        run_episode=episodes,
        on_finished=written.append,
    ).run()
    assert [g[0].ids.group_index for g in outcome.kept] == [1, 2]
    assert all(len(g) == 2 for g in outcome.kept)
    assert {c["episode_id"] for c in outcome.cancelled} == {"v0-g0000-e00", "v0-g0000-e01"}
    assert {c["state"] for c in outcome.cancelled} == {"running"}
    assert len(written) == outcome.finished_now == 4


async def test_concurrency_bound_and_queued_stragglers():
    episodes = Episodes(slow_groups={0})
    plans = plan_groups(TASKS, 4, seed=0, policy_version=0)
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=1,
        concurrency=3,
        run_episode=episodes,
        on_finished=lambda r: None,
    ).run()
    assert episodes.max_running <= 3
    assert len(outcome.kept) == 1
    states = sorted(c["state"] for c in outcome.cancelled)
    # Group 0 (2 running, stuck) plus whatever of groups 2-3 had not finished.
    assert states.count("running") >= 2 and len(states) + outcome.finished_now == 8


async def test_a_resumed_run_skips_finished_episodes():
    first = Episodes(slow_groups=set())
    plans = plan_groups(TASKS, 2, seed=0, policy_version=0)
    done = [await first(p.task, ids) for p in plans[:1] for ids in p.episode_ids(2)]
    done.append(await first(plans[1].task, plans[1].episode_ids(2)[0]))
    again = Episodes(slow_groups=set())
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=2,
        concurrency=4,
        run_episode=again,
        on_finished=lambda r: None,
        finished=done,
    ).run()
    assert again.started == ["v0-g0001-e01"]
    assert outcome.finished_now == 1 and len(outcome.kept) == 2
    # Nothing left to do: no episode runs at all.
    nothing = Episodes(slow_groups=set())
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=2,
        concurrency=4,
        run_episode=nothing,
        on_finished=lambda r: None,
        finished=[r for g in outcome.kept for r in g],
    ).run()
    assert nothing.started == [] and len(outcome.kept) == 2


def test_select_complete_groups_orders_by_completion():
    def rec(g: int, e: int, t: float) -> RolloutEpisode:
        return RolloutEpisode(
            ids=EpisodeIds(f"g{g}-e{e}", f"g{g}", g, e),
            task_id="a",
            policy_version=0,
            mode="m",
            finished_at=t,
        )

    records = [rec(0, 0, 5), rec(0, 1, 9), rec(1, 0, 1), rec(1, 1, 2), rec(2, 0, 3)]
    assert [g[0].ids.group_index for g in select_complete_groups(records, 2, 5)] == [1, 0]


async def test_waiting_for_episodes_does_not_spin(monkeypatch):
    """One wake-up per finished episode: a loop that re-waits on finished jobs returns at
    once forever and starves the generation thread of the GIL (a rollout ran 20x slower)."""
    calls = 0
    real_wait = asyncio.wait

    async def counting_wait(*args, **kwargs):
        nonlocal calls
        calls += 1
        return await real_wait(*args, **kwargs)

    async def episode(task: Task, ids: EpisodeIds) -> RolloutEpisode:
        await asyncio.sleep(0.2 if ids.episode_id.endswith("e01") else 0)  # one fast, one slow
        return RolloutEpisode(
            ids=ids,
            task_id=task.id,
            policy_version=0,
            mode="roll-managed",
            finished_at=asyncio.get_running_loop().time(),
        )

    monkeypatch.setattr(asyncio, "wait", counting_wait)
    plans = plan_groups(TASKS[:1], 1, seed=0, policy_version=0)
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=1,
        concurrency=2,
        run_episode=episode,
        on_finished=lambda r: None,
    ).run()
    assert len(outcome.kept) == 1
    assert calls <= 3


class Rewarded:
    """Episodes that succeed per a task's table: {task id: [reward of episode 0, 1, ...]}."""

    def __init__(self, rewards: dict[str, list[float]]) -> None:
        self.rewards = rewards
        self.started: list[str] = []

    async def __call__(self, task: Task, ids: EpisodeIds) -> RolloutEpisode:
        self.started.append(ids.episode_id)
        await asyncio.sleep(0)
        reward = self.rewards[task.id][ids.episode_index]
        return RolloutEpisode(
            ids=ids,
            task_id=task.id,
            policy_version=0,
            mode="roll-managed",
            reward=reward,
            success=reward > 0,
            finished_at=asyncio.get_running_loop().time(),
        )


async def test_dynamic_sampling_keeps_groups_with_signal_and_skips_uniform_tasks():
    tasks = [Task(id=t, instruction=t) for t in ("solved", "mixed", "unsolved", "mixed-too")]
    episodes = Rewarded(
        {"solved": [1.0, 1.0], "unsolved": [0.0, 0.0], "mixed": [1.0, 0.0], "mixed-too": [0.0, 1.0]}
    )
    plans = plan_groups(tasks, 8, seed=0, policy_version=0)  # every task twice
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=3,
        concurrency=2,
        run_episode=episodes,
        on_finished=lambda r: None,
        informative=True,
    ).run()
    kept_tasks = sorted(g[0].task_id for g in outcome.kept)
    assert kept_tasks == ["mixed", "mixed", "mixed-too"]
    # "solved" ran once; its second visit was skipped, not rolled out; the batch was complete
    # before "unsolved" came round again.
    started_groups = {e.rsplit("-e", 1)[0] for e in episodes.started}
    assert started_groups == {"v0-g0000", "v0-g0001", "v0-g0002", "v0-g0003", "v0-g0005"}
    states = {c["group_id"]: c["state"] for c in outcome.cancelled}
    assert states == {"v0-g0004": "skipped", "v0-g0006": "queued", "v0-g0007": "queued"}


async def test_dynamic_sampling_tops_up_with_uniform_groups_when_the_plan_runs_out():
    tasks = [Task(id=t, instruction=t) for t in ("solved", "mixed", "unsolved")]
    episodes = Rewarded({"solved": [1.0, 1.0], "unsolved": [0.0, 0.0], "mixed": [1.0, 0.0]})
    plans = plan_groups(tasks, 3, seed=0, policy_version=0)
    outcome = await EnvManager(
        plans,
        group_size=2,
        needed=2,
        concurrency=2,
        run_episode=episodes,
        on_finished=lambda r: None,
        informative=True,
    ).run()
    assert outcome.kept[0][0].task_id == "mixed" and len(outcome.kept) == 2
    assert outcome.kept[1][0].task_id in ("solved", "unsolved")
    # Without dynamic sampling the first two complete groups are kept, signal or not.
    plain = await EnvManager(
        plans,
        group_size=2,
        needed=2,
        concurrency=2,
        run_episode=Rewarded(episodes.rewards),
        on_finished=lambda r: None,
    ).run()
    assert [g[0].task_id for g in plain.kept] == ["solved", "mixed"]
