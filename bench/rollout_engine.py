"""Rollout generation against the engine's limit, with the real default policy.

Runs the rollout stage (``rollout()``: env manager, real podman sandboxes, the
agent loop) with the embedded SmolLM2 policy on a few easy synthesized tasks,
then calls the same engine directly with a batch of the same size — the rate
the rollout could reach if generation never waited. Printed side by side:

    rollout tok/s (busy)   response tokens / seconds with at least one generate in flight
    rollout tok/s (wall)   response tokens / the whole rollout's wall time
    raw batched tok/s      one call of `concurrency` first-turn prompts, stop strings off,
                           every row generating `--raw-tokens` tokens (the engine's limit);
                           measured before and after the rollout, the mean is used, so
                           that a change of load on a shared machine shows as a spread
    ratio                  busy rate / raw rate (issue 20's target: >= 0.70)
    mean batch             rows per decode forward during the rollout (the limit runs at
                           `concurrency`; episodes in their sandbox or finished leave gaps)

and where an episode's time went: prefill, decode, waiting (queued, or done and
waiting for longer rows of its batch), sandbox (everything else: exec, reset,
verifier).

    python bench/rollout_engine.py                       # both engines, one after the other
    python bench/rollout_engine.py --engine continuous   # 8 episodes x 3 turns, the stage's engine
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
from termrl.llm.chat import ChatTokens
from termrl.llm.engine import Engine, Generation, ParamsArg, Prompt, SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.models import prepare_default_model
from termrl.llm.toolcalls import system_prompt
from termrl.sandbox import SandboxManager, SandboxSpec

DOCKERFILE = "FROM termrl/base:bookworm\nWORKDIR /app\n"
TEST_SH = (
    '#!/bin/bash\nmkdir -p /logs/verifier\n[ "$(cat /app/out.txt)" = {w} ] && echo 1 > '
    "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
)
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen"]


class Timed(Engine):
    """Records every generate an episode awaits: its wall time, tokens and the engine's split."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name, self.model_name = engine.name, engine.model_name
        self.tokenizer, self.context_window = engine.tokenizer, engine.context_window
        self.accepts_token_ids, self.merges_requests = engine.accepts_token_ids, True
        self.calls: dict[int, list[tuple[float, Generation]]] = defaultdict(list)
        self.in_flight = 0
        self.busy_sec = 0.0
        self._busy_since = 0.0

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        task = id(asyncio.current_task())
        if self.in_flight == 0:
            self._busy_since = time.perf_counter()
        self.in_flight += 1
        started = time.perf_counter()
        try:
            gens = await self.engine.generate(prompts, params)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_sec += time.perf_counter() - self._busy_since
        self.calls[task].append((time.perf_counter() - started, gens[0]))
        return gens

    async def aclose(self) -> None:
        await self.engine.aclose()


def make_tasks() -> list[Task]:
    return [
        Task(
            id=f"bench-{w}",
            instruction=f"Write the word {w} into the file /app/out.txt.",
            environment_files=[TaskFile("Dockerfile", DOCKERFILE.encode())],
            test_files=[TaskFile("test.sh", TEST_SH.format(w=w).encode(), 0o755)],
        )
        for w in WORDS
    ]


def build_engine(kind: str, model: Path, concurrency: int) -> tuple[Engine, Any]:
    """(the engine rollout talks to, the engine raw batched calls go to)."""
    if kind == "batching":
        inner = TransformersEngine(model, max_batch_size=concurrency)
        return BatchingEngine(inner, max_batch_size=concurrency), inner
    from termrl.llm.continuous import ContinuousEngine

    engine = ContinuousEngine(model, max_batch_size=concurrency)
    return engine, engine


def raw_rate(engine: Engine, prompts: list[list[int]], tokens: int) -> float:
    """Response tokens/s of one batched call: every row generates exactly ``tokens``, from a cold cache.

    Called as the rollout calls the engine (``await engine.generate``: a worker thread for
    the whole-batch engine, the scheduler thread for the continuous one). A blocking
    ``generate_sync`` from the main thread measured 1.6 tok/s against 15 in the rollout on
    the loaded 2-core machine, which made the ratio meaningless.
    """
    params = SamplingParams(max_new_tokens=tokens, stop=())
    asyncio.run(engine.generate(prompts[:1], SamplingParams(max_new_tokens=4, stop=())))  # warm-up
    cache = getattr(engine, "prefix_cache", None)
    if cache is not None:  # prefill every prompt, as the whole-batch engine does
        cache.clear()
    started = time.perf_counter()
    gens = asyncio.run(engine.generate(prompts, params))
    rate = sum(len(g.token_ids) for g in gens) / (time.perf_counter() - started)
    if cache is not None:  # the rollout starts cold, as the stage does
        cache.clear()
    return rate


def first_turn_prompts(engine: Engine, tasks: list[Task], style: str) -> list[list[int]]:
    """The token prompts the agent starts each task's episode with."""
    chat = ChatTokens(engine.tokenizer)
    return [
        chat.initial_ids(
            [
                {"role": "system", "content": system_prompt(style)},
                {"role": "user", "content": t.instruction},
            ]
        )
        for t in tasks
    ]


def mean_batch(engine: Any) -> float:
    sizes = getattr(engine, "step_sizes", None) or getattr(engine, "batch_sizes", None) or [0]
    return statistics.mean(sizes)


def report(
    timed: Timed,
    walls: list[float],
    rollout_sec: float,
    raws: list[float],
    batch: float,
    raw_at_batch: float,
) -> None:
    raw = statistics.mean(raws)
    gens = [g for calls in timed.calls.values() for _, g in calls]
    tokens = sum(len(g.token_ids) for g in gens)
    busy_rate, wall_rate = tokens / timed.busy_sec, tokens / rollout_sec
    print(
        f"rollout: {len(walls)} episodes, {len(gens)} generate calls, {tokens} response tokens in "
        f"{rollout_sec:.1f} s (generation in flight {timed.busy_sec:.1f} s)"
    )
    print(
        f"rollout tok/s (busy) {busy_rate:6.1f}   rollout tok/s (wall) {wall_rate:6.1f}   "
        f"raw batched tok/s {raw:6.1f} (before {raws[0]:.1f}, after {raws[1]:.1f}); mean batch {batch:.1f}"
    )
    print(
        f"ratio rollout(busy)/raw: {busy_rate / raw:.2f}  (target >= 0.70); "
        f"rollout(wall)/raw: {wall_rate / raw:.2f}"
    )
    print(
        f"raw batched tok/s at the rollout's mean batch ({round(batch)}): {raw_at_batch:.1f}; "
        f"rollout(busy)/that: {busy_rate / raw_at_batch:.2f}"
    )
    per_episode: list[dict[str, float]] = []
    for calls in timed.calls.values():
        awaited = sum(s for s, _ in calls)
        prefill = sum(g.meta.get("prefill_ms", 0.0) for _, g in calls) / 1000.0
        decode = sum(g.meta.get("decode_ms", 0.0) for _, g in calls) / 1000.0
        per_episode.append(
            {
                "generate": awaited,
                "prefill": prefill,
                "decode": decode,
                "waiting": awaited - prefill - decode,
            }
        )
    mean = {k: statistics.mean(e[k] for e in per_episode) for k in per_episode[0]}
    wall = statistics.mean(walls)
    print(
        f"per episode (mean s): wall {wall:.1f} = prefill {mean['prefill']:.1f} + decode "
        f"{mean['decode']:.1f} + waiting {mean['waiting']:.1f} + sandbox/other "
        f"{wall - mean['generate']:.1f}"
    )
    reused = sum(g.meta.get("reused_tokens", 0) for g in gens)
    fed = sum(len(g.prompt_ids or []) for g in gens)
    print(f"prompt tokens {fed}, served from the KV cache {reused} ({reused / max(fed, 1):.0%})")


def bench(
    kind: str, args: argparse.Namespace, tasks: list[Task], model: Path, scratch: Path
) -> None:
    """One engine: raw rate, the rollout, raw rate again; print the report."""
    engine, raw_engine = build_engine(kind, model, args.episodes)
    timed = Timed(engine)
    config = RolloutConfig(
        tasks=scratch / "tasks.parquet",
        out=scratch / kind / "t.parquet",
        groups=args.episodes // 4,
        group_size=4,
        redundancy=0,
        concurrency=args.episodes,
        max_turns=args.turns,
        max_new_tokens=args.max_new_tokens,
        keep_parts=True,
    )
    print(
        f"== engine {kind}: {args.episodes} episodes, <= {args.turns} turns, "
        f"<= {args.max_new_tokens} tokens per turn, concurrency {args.episodes}"
    )
    prompts = first_turn_prompts(engine, tasks, config.prompt_style)[: args.episodes]
    raws = [raw_rate(raw_engine, prompts, args.raw_tokens)]
    if kind == "continuous":
        raw_engine.step_sizes.clear()
    started = time.perf_counter()
    asyncio.run(rollout(config, tasks, timed))
    rollout_sec = time.perf_counter() - started
    walls = [
        read_trajectories(part).column("_wall_sec")[0].as_py()
        for part in config.parts_dir.glob("ep-*.parquet")
    ]
    batch = mean_batch(engine if kind == "batching" else raw_engine)
    raws.append(raw_rate(raw_engine, prompts, args.raw_tokens))
    raw_at_batch = raw_rate(raw_engine, prompts[: max(round(batch), 1)], args.raw_tokens)
    report(timed, walls, rollout_sec, raws, batch, raw_at_batch)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=("continuous", "batching", "both"), default="both")
    parser.add_argument("--episodes", type=int, default=8, help="groups of 4, all concurrent")
    parser.add_argument("--turns", type=int, default=3, help="max turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument(
        "--raw-tokens", type=int, default=150, help="about a rollout turn's mean response"
    )
    args = parser.parse_args()
    tasks = make_tasks()
    model = prepare_default_model()

    async def prebuild() -> None:
        async with SandboxManager() as manager:
            await manager.build_image(SandboxSpec.from_task(tasks[0]))

    asyncio.run(prebuild())  # every task shares the image
    scratch = Path(tempfile.mkdtemp(prefix="termrl-bench-rollout-engine-"))
    try:
        save_tasks(scratch / "tasks.parquet", tasks)
        for kind in ("batching", "continuous") if args.engine == "both" else (args.engine,):
            bench(kind, args, tasks, model, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
