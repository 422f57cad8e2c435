"""Rollout throughput: asynchronous (termrl's env manager) vs batch-synchronous, side by side.

Both modes run the same episodes — same tasks, same real podman sandboxes,
same reset/agent/reward code (``SandboxEpisodeRunner``), the same scripted fast
policy — on the same long-tail latency distribution: every command the policy
runs starts with ``sleep D``, D drawn per turn (default: 85 % 0.3 s, 10 % 3 s,
5 % 20 s; the seed's "most rollouts are quick, a few take very long").

    batch-synchronous  batches of `concurrency` episodes in lockstep: one batched
                       generate per turn once *every* live episode has asked (a
                       barrier), the next batch only after the whole batch ended
    asynchronous       rollout() as the stage runs it: every episode on its own,
                       generate calls merged by the batching front, N + R groups
                       started and the first N complete kept

Throughput is kept episodes per wall-clock second; the printed ratio is
async / sync (target ≥ 3.0; ROLL Flash reports 2.72× on agentic tasks).

    python bench/rollout.py                          # 8 groups × 4, concurrency 8
    python bench/rollout.py --groups 4 --group-size 2 --concurrency 4   # quick look
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.rollout.config import RolloutConfig
from components.rollout.env_manager import plan_groups
from components.rollout.episode import EpisodeIds, SandboxEpisodeRunner, roll_managed_step
from components.rollout.stage import rollout
from termrl.artifacts import Task, TaskFile, read_trajectories, save_tasks
from termrl.llm.engine import Engine, Generation, Prompt, SamplingParams
from termrl.llm.models import load_default_tokenizer
from termrl.sandbox import SandboxManager, SandboxSpec

DOCKERFILE = "FROM termrl/base:bookworm\nWORKDIR /app\n"
TEST_SH = (
    '#!/bin/bash\nmkdir -p /logs/verifier\n[ "$(cat /app/out.txt)" = {w} ] && echo 1 > '
    "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)
EPISODE = contextvars.ContextVar[str]("EPISODE", default="")


def parse_tail(text: str) -> list[tuple[float, float]]:
    """'0.85:0.3,0.10:3,0.05:20' → [(probability, seconds), ...]."""
    pairs = [tuple(float(x) for x in part.split(":")) for part in text.split(",")]
    if abs(sum(p for p, _ in pairs) - 1.0) > 1e-6:
        raise SystemExit(f"--tail probabilities must sum to 1: {text}")
    return pairs  # type: ignore[return-value]


class DelayPolicy(Engine):
    """Scripted fast policy: `turns` commands `sleep D && echo WORD > /app/out.txt`, then done."""

    name = model_name = "delay-policy"
    accepts_token_ids = True
    context_window = 8192

    def __init__(self, tokenizer: Any, tail: list[tuple[float, float]], turns: int, seed: int):
        self.tokenizer = tokenizer
        self.tail = tail
        self.turns = turns
        self.rng = random.Random(seed)
        self.delays: list[float] = []
        self.batch_sizes: list[int] = []

    def _delay(self) -> float:
        r, acc = self.rng.random(), 0.0
        chosen = self.tail[-1][1]
        for probability, seconds in self.tail:
            acc += probability
            if r < acc:
                chosen = seconds
                break
        self.delays.append(chosen)
        return chosen

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        self.batch_sizes.append(len(prompts))
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            word = (
                text.split("Write the word ", 1)[1].split()[0] if "Write the word " in text else "x"
            )
            if text.count("<tool_response>") >= self.turns:
                reply = '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
            else:
                command = f"sleep {self._delay():g} && echo {word} > /app/out.txt"
                reply = (
                    '<tool_call>\n{"name": "bash", "arguments": {"command": "'
                    + command
                    + '", "timeout": 120}}\n</tool_call>'
                )
            ids = self.tokenizer.encode(reply, add_special_tokens=False)
            out.append(
                Generation(
                    self.tokenizer.decode(ids),
                    ids,
                    [-0.1] * len(ids),
                    "stop",
                    prompt_ids=list(prompt),
                )
            )
        return out


class Lockstep(Engine):
    """A barrier in front of an engine: one batched generate once every live episode asked."""

    accepts_token_ids = True

    def __init__(self, engine: Engine, episodes: set[str]):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.context_window = engine.context_window
        self.live = set(episodes)
        self.waiting: list[tuple[Prompt, SamplingParams, asyncio.Future[Generation]]] = []

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((prompts[0], params, future))
        self._flush()
        return [await future]

    def leave(self, episode_id: str) -> None:
        self.live.discard(episode_id)
        self._flush()

    def _flush(self) -> None:
        if not self.waiting or len(self.waiting) < len(self.live):
            return
        batch, self.waiting = self.waiting, []
        asyncio.ensure_future(self._run(batch))

    async def _run(
        self, batch: list[tuple[Prompt, SamplingParams, asyncio.Future[Generation]]]
    ) -> None:
        results = await self.engine.generate([p for p, _, _ in batch], batch[0][1])
        for (_, _, future), result in zip(batch, results, strict=True):
            future.set_result(result)


async def run_sync(
    config: RolloutConfig, tasks: list[Task], policy: DelayPolicy
) -> tuple[int, float, list[float]]:
    """Batch-synchronous rollout of groups × group_size episodes; (ok, wall seconds, episode walls)."""
    plans = plan_groups(tasks, config.groups, seed=config.seed, policy_version=0)
    jobs = [(p.task, ids) for p in plans for ids in p.episode_ids(config.group_size)]
    started = time.monotonic()
    done = 0
    walls: list[float] = []
    async with SandboxManager(max_sessions=config.concurrency) as manager:
        for start in range(0, len(jobs), config.concurrency):
            batch = jobs[start : start + config.concurrency]
            lockstep = Lockstep(policy, {ids.episode_id for _, ids in batch})
            agent = roll_managed_step(lockstep, config.agent)

            async def step(
                session: Any,
                recorder: Any,
                task: Task,
                ids: EpisodeIds,
                lockstep: Lockstep = lockstep,
                agent: Any = agent,
                *,
                after: Any = None,
                budget_sec: float | None = None,
            ) -> Any:
                try:
                    return await agent(
                        session, recorder, task, ids, after=after, budget_sec=budget_sec
                    )
                finally:
                    lockstep.leave(ids.episode_id)

            runner = SandboxEpisodeRunner(
                manager,
                step,
                mode="sync",
                policy_version=0,
                sandbox_lifetime_sec=config.sandbox_lifetime_sec,
            )

            async def one(
                task: Task, ids: EpisodeIds, runner: Any = runner, lockstep: Lockstep = lockstep
            ) -> Any:
                try:
                    return await runner(task, ids)
                finally:
                    lockstep.leave(ids.episode_id)  # also when it failed before the agent ran

            records = await asyncio.gather(*(one(t, i) for t, i in batch))
            done += sum(r.failure_type is None for r in records)
            walls += [r.wall_sec for r in records]
    return done, time.monotonic() - started, walls


async def prebuild(tasks: list[Task]) -> None:
    async with SandboxManager() as manager:
        for task in tasks:
            await manager.build_image(SandboxSpec.from_task(task))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--redundancy", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--turns", type=int, default=2, help="commands per episode before done")
    parser.add_argument(
        "--tail",
        default="0.85:0.3,0.10:3,0.05:20",
        help="per-command delay distribution, probability:seconds,...",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tail = parse_tail(args.tail)
    words = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen"]
    tasks = [
        Task(
            id=f"bench-{w}",
            instruction=f"Write the word {w} into /app/out.txt.",
            environment_files=[TaskFile("Dockerfile", DOCKERFILE.encode())],
            test_files=[TaskFile("test.sh", TEST_SH.format(w=w).encode(), 0o755)],
        )
        for w in words
    ]
    tokenizer = load_default_tokenizer()
    asyncio.run(prebuild(tasks[:1]))  # one environment: every task shares the image
    scratch = Path(tempfile.mkdtemp(prefix="termrl-bench-rollout-"))
    try:
        save_tasks(scratch / "tasks.parquet", tasks)
        config = RolloutConfig(
            tasks=scratch / "tasks.parquet",
            out=scratch / "async" / "t.parquet",
            groups=args.groups,
            group_size=args.group_size,
            redundancy=args.redundancy,
            concurrency=args.concurrency,
            max_turns=args.turns + 2,
            seed=args.seed,
            keep_parts=True,
        )
        n = args.groups * args.group_size
        print(
            f"{n} episodes kept per mode ({args.groups} groups × {args.group_size}), concurrency "
            f"{args.concurrency}, {args.turns} commands per episode, delay tail {args.tail}"
        )
        sync_policy = DelayPolicy(tokenizer, tail, args.turns, args.seed)
        sync_ok, sync_sec, sync_walls = asyncio.run(run_sync(config, tasks, sync_policy))
        print(
            f"batch-synchronous: {n} episodes ({sync_ok} ok) in {sync_sec:6.1f} s = "
            f"{n / sync_sec:.3f} episodes/s; mean batch {statistics.mean(sync_policy.batch_sizes):.1f}"
        )
        print(
            f"  sync per episode: mean wall {statistics.mean(sync_walls):.1f} s, mean injected "
            f"delay {sum(sync_policy.delays) / n:.1f} s"
        )
        async_policy = DelayPolicy(tokenizer, tail, args.turns, args.seed)
        started = time.monotonic()
        summary = asyncio.run(rollout(config, tasks, async_policy))
        async_sec = time.monotonic() - started
        ok = sum(
            1
            for r in read_trajectories(config.out).to_pylist()
            if r["chunk_index"] == 0 and r["failure_type"] is None
        )
        print(
            f"asynchronous:      {summary.episodes} episodes ({ok} ok) in {async_sec:6.1f} s = "
            f"{summary.episodes / async_sec:.3f} episodes/s; {summary.cancelled} stragglers/queued "
            f"cancelled; mean batch {statistics.mean(async_policy.batch_sizes):.1f}"
        )
        walls = [
            read_trajectories(part).column("_wall_sec")[0].as_py()
            for part in config.parts_dir.glob("ep-*.parquet")
        ]
        print(
            f"  async per episode: mean wall {statistics.mean(walls):.1f} s (median "
            f"{statistics.median(walls):.1f}, max {max(walls):.1f}), mean injected delay "
            f"{sum(async_policy.delays) / len(walls):.1f} s over {len(walls)} episodes run"
        )
        ratio = (summary.episodes / async_sec) / (n / sync_sec)
        print(f"throughput ratio async/sync: {ratio:.2f}x (target >= 3.0x)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
