"""The demonstrate stage, top to bottom: each task's golden solution as an expert trajectory.

    main(config)
      ├─ load tasks; read back the tasks already done (resume: <out>.parts/)
      ├─ per task, in a fresh sandbox (termrl.taskrun.TaskSandboxes, ≤ concurrency at once):
      │     demonstration_commands(task)          one bash turn per solution step, then done
      │     run_episode(ReplayEngine(...), ...)   the agent's own loop: real observations,
      │                                           the policy's chat tokens
      │     run_tests(...)                        kept only if the replay passes the tests
      │   ─► part file written at once (rows, or the reason there is no demonstration)
      └─ merge ─► demonstrations.parquet (trajectories artifact, source = expert) + summary

A task without a usable solution simply has no demonstration; the reason is
counted (``no solution``, ``uses /solution files``, ``replay failed its
tests``, ``environment error`` ...), never raised. A multi-step task (Harbor's
``[[steps]]``) gets none either (``multi-step task``): rollout never anchors
one (``components.rollout.anchors``), so a demonstration would go unused.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from components.demonstrate.config import DemonstrateConfig
from termrl.agent.demonstration import (
    NoDemonstration,
    ReplayEngine,
    demonstration_commands,
    expert_responses,
)
from termrl.agent.loop import run_episode
from termrl.artifacts import load_tasks
from termrl.artifacts.tasks import Task
from termrl.artifacts.trajectories import (
    demonstration_rows,
    read_trajectories,
    write_trajectories,
)
from termrl.errors import ConfigError, TermrlError
from termrl.sandbox.manager import SandboxManager
from termrl.taskrun import TaskSandboxes, run_tests

__all__ = [
    "MULTI_STEP",
    "DemonstrationSummary",
    "demonstrate",
    "expert_rows",
    "main",
    "phrasings",
]

MULTI_STEP = "multi-step task: rollout starts its episodes from scratch (anchor 1)"
"""The reason a multi-step task has no demonstration (counted by the part before the colon)."""


@dataclass
class DemonstrationSummary:
    tasks: int
    demonstrations: int
    """Tasks with a demonstration."""
    episodes: int
    """Demonstrations written: one per task and phrasing."""
    chunks: int
    dropped: dict[str, int]
    wall_sec: float

    def lines(self) -> list[str]:
        reasons = ", ".join(
            f"{n} {r}" for r, n in sorted(self.dropped.items(), key=lambda x: -x[1])
        )
        return [
            f"demonstrations: {self.demonstrations}/{self.tasks} tasks, {self.episodes} episodes "
            f"(one per phrasing), {self.chunks} chunks, "
            f"{self.wall_sec:.0f} s" + (f"; none for {reasons}" if reasons else "")
        ]


def main(config: DemonstrateConfig) -> DemonstrationSummary:
    """Run the stage as configured (the command line and the KFP component call this)."""
    config.validate()
    tasks = load_tasks(config.tasks)
    if not tasks:
        raise ConfigError(f"tasks artifact {config.tasks} holds no tasks")
    from termrl.llm.models import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path(config.model))
    summary = asyncio.run(demonstrate(config, tasks, tokenizer))
    for line in summary.lines():
        print(line)
    return summary


def phrasings(task: Task, every_phrasing: bool) -> list[tuple[str, str]]:
    """``(name, instruction)`` of each demonstration to write for ``task``: its own instruction
    (name ``""``) first, then, with ``every_phrasing``, each other voice its synthesizer recorded
    (``metadata["phrasings"]``, style → text; ``components.synthesize.families.phrasing``)."""
    out = [("", task.instruction)]
    recorded = task.metadata.get("phrasings") if every_phrasing else None
    if not isinstance(recorded, dict):
        return out
    seen = {task.instruction.strip()}
    for style, text in sorted(recorded.items()):
        if isinstance(text, str) and text.strip() and text.strip() not in seen:
            seen.add(text.strip())
            out.append((str(style), text.strip() + "\n"))
    return out


def expert_rows(task: Task, result: Any, reward: float, phrasing: str = "") -> list[dict[str, Any]]:
    """The trajectories rows of one demonstration (every chunk replayed, source expert); a
    ``phrasing`` other than the task's own instruction gets an episode (and group) of its own."""
    name = f"{task.id}~{phrasing}" if phrasing else task.id
    return demonstration_rows(
        [chunk.to_row() for chunk in result.chunks],
        episode_id=f"expert-{name}",
        group_id=f"expert:{name}",
        task_id=task.id,
        mode="demonstration",
        reward=reward,
        result=result,
    )


async def _one(
    sandboxes: TaskSandboxes, config: DemonstrateConfig, task: Task, tokenizer: Any
) -> tuple[list[dict[str, Any]], str | None]:
    """A task's demonstration rows (one episode per phrasing), or no rows and the reason."""
    if task.steps:
        return [], MULTI_STEP
    try:
        commands = demonstration_commands(task)
    except NoDemonstration as exc:
        return [], str(exc)
    responses = expert_responses(commands)
    agent = replace(config.agent, max_turns=max(config.agent.max_turns, len(responses)))
    rows: list[dict[str, Any]] = []
    # Each phrasing replays in a fresh sandbox and must pass the tests again: a demonstration
    # is real observations, never a transcript with its prompt swapped.
    for phrasing, instruction in phrasings(task, config.every_phrasing):
        try:
            async with sandboxes.open(task) as session:
                engine = ReplayEngine(tokenizer, responses, context_window=agent.context_window)
                result = await run_episode(engine, session, instruction, agent)
                if result.failure_type is not None or result.stop_reason != "done":
                    return (
                        [],
                        f"replay stopped: {result.stop_reason} {result.failure_type or ''}".strip(),
                    )
                outcome = await run_tests(session, task)
        except TermrlError as exc:
            return [], f"environment error: {type(exc).__name__}"
        if not outcome.passed:
            return [], "replay failed its tests"
        rows += expert_rows(task, result, outcome.reward, phrasing)
    return rows, None


def _part(config: DemonstrateConfig, task: Task) -> tuple[Path, Path]:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task.id)
    return config.parts_dir / f"{safe}.parquet", config.parts_dir / f"{safe}.none.json"


async def demonstrate(
    config: DemonstrateConfig, tasks: list[Task], tokenizer: Any
) -> DemonstrationSummary:
    """Replay every task's solution; write the demonstrations artifact."""
    started = time.monotonic()
    config.parts_dir.mkdir(parents=True, exist_ok=True)
    todo = [t for t in tasks if not any(p.exists() for p in _part(config, t))]
    bar = tqdm(
        total=len(tasks),
        initial=len(tasks) - len(todo),
        desc="demonstrate",
        unit="task",
        disable=not config.progress,
    )
    manager = SandboxManager(
        config.sandbox,
        max_sessions=config.concurrency,
        acquire_timeout_sec=math.inf,
    )
    async with manager:
        sandboxes = TaskSandboxes(manager)

        async def one(task: Task) -> None:
            rows, reason = await _one(sandboxes, config, task, tokenizer)
            rows_path, none_path = _part(config, task)
            if rows:
                write_trajectories(rows_path, rows)
            else:
                tmp = none_path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"task_id": task.id, "reason": reason}))
                tmp.replace(none_path)
            bar.update(1)

        try:
            async with asyncio.TaskGroup() as group:
                for task in todo:
                    group.create_task(one(task))
        finally:
            bar.close()
    return _merge(config, tasks, time.monotonic() - started)


def _merge(config: DemonstrateConfig, tasks: list[Task], wall_sec: float) -> DemonstrationSummary:
    rows: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    demonstrations = 0
    for task in tasks:
        rows_path, none_path = _part(config, task)
        if rows_path.exists():
            rows.extend(read_trajectories(rows_path).to_pylist())
            demonstrations += 1
        else:
            reason = json.loads(none_path.read_text())["reason"]
            dropped[reason.split(":")[0]] += 1
    write_trajectories(config.out, rows)
    episodes = len({row["episode_id"] for row in rows})
    return DemonstrationSummary(
        len(tasks), demonstrations, episodes, len(rows), dict(dropped), wall_sec
    )
