"""Rollout generation against the engine's limit, with the real default policy.

Runs the rollout stage (``rollout()``: env manager, real podman sandboxes, the
agent loop) with the embedded SmolLM2 policy on a few easy synthesized tasks,
then calls the same engine directly with a batch of the same size — the rate
the rollout could reach if generation never waited. Printed side by side:

    rollout tok/s (busy)   response tokens / seconds with at least one generate in flight
    rollout tok/s (wall)   response tokens / the whole rollout's wall time
    raw batched tok/s      one call of `concurrency` first-turn prompts, stop strings off,
                           every row generating `--raw-tokens` tokens (the engine's limit)
    ratio                  busy rate / raw rate (issue 20's target: >= 0.70)

and where an episode's time went: prefill, decode, waiting (queued, or done and
waiting for longer rows of its batch), sandbox (everything else: exec, reset,
verifier).

    python bench/rollout_engine.py                       # 8 episodes x 3 turns, continuous engine
    python bench/rollout_engine.py --engine batching     # the batching front + whole-batch engine
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.rollout.config import RolloutConfig
from components.rollout.stage import rollout
from termrl.artifacts import Task, TaskFile, read_trajectories, save_tasks
from termrl.llm.batching import BatchingEngine
from termrl.llm.engine import Engine, Generation, ParamsArg, Prompt, SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.models import prepare_default_model
from termrl.sandbox import SandboxManager, SandboxSpec

DOCKERFILE = "FROM termrl/base:bookworm\nWORKDIR /app\n"
TEST_SH = ("#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /app/out.txt)\" = {w} ] && echo 1 > "
           "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")  # fmt: skip
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen"]


class Timed(Engine):
    """Records every generate an episode awaits: its wall time, tokens and the engine's split."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name, self.model_name = engine.name, engine.model_name
        self.tokenizer, self.context_window = engine.tokenizer, engine.context_window
        self.accepts_token_ids, self.merges_requests = engine.accepts_token_ids, True
        self.calls: dict[int, list[tuple[float, Generation]]] = defaultdict(list)
        self.first_prompts: list[list[int]] = []
        self.in_flight = 0
        self.busy_s = 0.0
        self._busy_since = 0.0

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        task = id(asyncio.current_task())
        if not self.calls[task]:
            self.first_prompts.append(list(prompts[0]))  # type: ignore[arg-type]
        if self.in_flight == 0:
            self._busy_since = time.perf_counter()
        self.in_flight += 1
        started = time.perf_counter()
        try:
            gens = await self.engine.generate(prompts, params)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_s += time.perf_counter() - self._busy_since
        self.calls[task].append((time.perf_counter() - started, gens[0]))
        return gens

    async def aclose(self) -> None:
        await self.engine.aclose()


def make_tasks() -> list[Task]:
    return [Task(id=f"bench-{w}", instruction=f"Write the word {w} into the file /app/out.txt.",
                 environment_files=[TaskFile("Dockerfile", DOCKERFILE.encode())],
                 test_files=[TaskFile("test.sh", TEST_SH.format(w=w).encode(), 0o755)])
            for w in WORDS]  # fmt: skip


def build_engine(kind: str, model: Path, concurrency: int) -> tuple[Engine, Any]:
    """(the engine rollout talks to, the engine raw batched calls go to)."""
    if kind == "batching":
        inner = TransformersEngine(model, max_batch_size=concurrency)
        return BatchingEngine(inner, max_batch_size=concurrency), inner
    from termrl.llm.continuous import ContinuousEngine

    engine = ContinuousEngine(model, max_batch_size=concurrency)
    return engine, engine


def raw_rate(engine: Any, prompts: list[list[int]], tokens: int) -> float:
    """Response tokens/s of one batched call: every row generates exactly ``tokens``."""
    params = SamplingParams(max_new_tokens=tokens, stop=())
    engine.generate_sync(prompts[:1], SamplingParams(max_new_tokens=4, stop=()))  # warm-up
    started = time.perf_counter()
    gens = engine.generate_sync(prompts, params)
    return sum(len(g.token_ids) for g in gens) / (time.perf_counter() - started)


def report(timed: Timed, walls: list[float], rollout_s: float, raw: float) -> None:
    gens = [g for calls in timed.calls.values() for _, g in calls]
    tokens = sum(len(g.token_ids) for g in gens)
    busy_rate, wall_rate = tokens / timed.busy_s, tokens / rollout_s
    print(f"rollout: {len(walls)} episodes, {len(gens)} generate calls, {tokens} response tokens in "
          f"{rollout_s:.1f} s (generation in flight {timed.busy_s:.1f} s)")  # fmt: skip
    print(f"rollout tok/s (busy) {busy_rate:6.1f}   rollout tok/s (wall) {wall_rate:6.1f}   "
          f"raw batched tok/s {raw:6.1f}")
    print(f"ratio rollout(busy)/raw: {busy_rate / raw:.2f}  (target >= 0.70); "
          f"rollout(wall)/raw: {wall_rate / raw:.2f}")
    per_episode: list[dict[str, float]] = []
    for calls in timed.calls.values():
        awaited = sum(s for s, _ in calls)
        prefill = sum(g.meta.get("prefill_ms", 0.0) for _, g in calls) / 1000.0
        decode = sum(g.meta.get("decode_ms", 0.0) for _, g in calls) / 1000.0
        per_episode.append({"generate": awaited, "prefill": prefill, "decode": decode,
                            "waiting": awaited - prefill - decode})  # fmt: skip
    mean = {k: statistics.mean(e[k] for e in per_episode) for k in per_episode[0]}
    wall = statistics.mean(walls)
    print(f"per episode (mean s): wall {wall:.1f} = prefill {mean['prefill']:.1f} + decode "
          f"{mean['decode']:.1f} + waiting {mean['waiting']:.1f} + sandbox/other "
          f"{wall - mean['generate']:.1f}")
    reused = sum(g.meta.get("reused_tokens", 0) for g in gens)
    fed = sum(len(g.prompt_ids or []) for g in gens)
    print(f"prompt tokens {fed}, served from the KV cache {reused} ({reused / max(fed, 1):.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=("continuous", "batching"), default="continuous")
    parser.add_argument("--episodes", type=int, default=8, help="groups of 4, all concurrent")
    parser.add_argument("--turns", type=int, default=3, help="max turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--raw-tokens", type=int, default=96)
    args = parser.parse_args()
    tasks = make_tasks()
    model = prepare_default_model()
    engine, raw_engine = build_engine(args.engine, model, args.episodes)
    timed = Timed(engine)

    async def prebuild() -> None:
        async with SandboxManager() as manager:
            await manager.build_image(SandboxSpec.from_task(tasks[0]))

    asyncio.run(prebuild())  # every task shares the image
    scratch = Path(tempfile.mkdtemp(prefix="termrl-bench-rollout-engine-"))
    try:
        save_tasks(scratch / "tasks.parquet", tasks)
        config = RolloutConfig(tasks=scratch / "tasks.parquet", out=scratch / "t.parquet",
                               groups=args.episodes // 4, group_size=4, redundancy=0,
                               concurrency=args.episodes, max_turns=args.turns,
                               max_new_tokens=args.max_new_tokens, keep_parts=True)  # fmt: skip
        print(f"engine {args.engine}: {args.episodes} episodes, <= {args.turns} turns, "
              f"<= {args.max_new_tokens} tokens per turn, concurrency {args.episodes}")
        started = time.perf_counter()
        asyncio.run(rollout(config, tasks, timed))
        rollout_s = time.perf_counter() - started
        walls = [read_trajectories(part).column("_wall_s")[0].as_py()
                 for part in config.parts_dir.glob("ep-*.parquet")]
        raw = raw_rate(raw_engine, timed.first_prompts[: args.episodes], args.raw_tokens)
        report(timed, walls, rollout_s, raw)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
