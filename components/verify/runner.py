"""Verify many tasks in parallel: sandbox checks under one concurrency bound, judges beside them.

Per task::

    build the image ─┬─ ground truth ×K ─┐
                     ├─ no-op ×K ────────┴─ flakiness ─► ablation, state replay (when the
                     │                                   solution passes and the no-op fails,
                     │                                   and each only when required)
                     └─ judge panel (no sandbox; its own request bound)

Sandboxes come from ``termrl.taskrun.TaskSandboxes``; at most
``concurrency`` are alive at once (the manager's ``max_sessions``, where
checks queue for a slot). Tasks in flight are bounded by the same number, so
the progress bar moves steadily instead of every task finishing at the end.
The ``local`` judge needs the ModelProxy: when ``model_proxy_url`` is unset,
one is started here in-process for the run, serving ``local_judge_model``
(the embedded default policy when that is unset too).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from contextlib import AsyncExitStack

from tqdm import tqdm

from components.verify.admission import Verdict
from components.verify.checks import (
    check_ablation,
    check_flakiness,
    check_ground_truth,
    check_noop,
    check_state_replay,
)
from components.verify.config import LOCAL_JUDGE, VerifyConfig
from components.verify.judges import JudgePanel
from components.verify.outcomes import CheckOutcome
from termrl.artifacts.tasks import Task
from termrl.errors import TermrlError
from termrl.sandbox import SandboxManager
from termrl.taskrun import TaskSandboxes

__all__ = ["verify_task", "verify_tasks"]


class _Context:
    def __init__(self, config: VerifyConfig, sandboxes: TaskSandboxes, panel: JudgePanel | None):
        self.config = config
        self.sandboxes = sandboxes
        self.panel = panel
        self.inert = [re.compile(p) for p in config.inert_step_patterns]
        self.process = [re.compile(p, re.IGNORECASE) for p in config.process_patterns]


async def _judge(ctx: _Context, task: Task) -> CheckOutcome:
    if ctx.panel is None:
        return CheckOutcome("judges", "skipped", "no judges configured")
    return await ctx.panel.review(task)


async def verify_task(ctx: _Context, task: Task) -> Verdict:
    """Every check of one task and the admission decision."""
    started = time.monotonic()
    config = ctx.config
    async with asyncio.TaskGroup() as group:
        judging = group.create_task(_judge(ctx, task))
        outcomes = await _sandbox_checks(ctx, task)
    outcomes["judges"] = judging.result()
    return Verdict.of(task.id, outcomes, config.require, time.monotonic() - started)


async def _sandbox_checks(ctx: _Context, task: Task) -> dict[str, CheckOutcome]:
    config, sandboxes = ctx.config, ctx.sandboxes
    try:
        await sandboxes.build(task)
    except (TermrlError, OSError) as exc:
        why = f"the environment does not build: {type(exc).__name__}: {str(exc)[-1500:]}"
        outcomes = {name: CheckOutcome(name, "error", why) for name in ("ground_truth", "noop")}
    else:
        async with asyncio.TaskGroup() as group:
            truth = group.create_task(check_ground_truth(sandboxes, task, config.repeats))
            noop = group.create_task(check_noop(sandboxes, task, config.repeats))
        outcomes = {"ground_truth": truth.result(), "noop": noop.result()}
    outcomes["flakiness"] = check_flakiness(outcomes["ground_truth"], outcomes["noop"])
    gates = [name for name in ("flakiness", "ground_truth", "noop") if not outcomes[name].ok]
    if gates:
        because = f"{gates[0]} did not pass"
        outcomes["ablation"] = CheckOutcome.blocked("ablation", because)
        outcomes["state_replay"] = CheckOutcome.blocked("state_replay", because)
        return outcomes
    # The probes cost a sandbox per probed step (ablation) and two (the replay): a set that
    # is only measured on, never trained on, may leave them out of ``require`` and skip them.
    probes = {
        "ablation": lambda: check_ablation(
            sandboxes, task, inert_patterns=ctx.inert, max_steps=config.max_ablation_steps
        ),
        "state_replay": lambda: check_state_replay(
            sandboxes,
            task,
            exclude=config.replay_exclude,
            process_patterns=ctx.process,
            max_bytes=config.replay_max_mb * 1024 * 1024,
        ),
    }
    async with asyncio.TaskGroup() as group:
        running = {
            name: group.create_task(probe())
            for name, probe in probes.items()
            if name in config.require
        }
    for name in probes:
        outcomes[name] = (
            running[name].result()
            if name in running
            else CheckOutcome(name, "skipped", "not run: not among the required checks")
        )
    return outcomes


async def _local_proxy(config: VerifyConfig, stack: AsyncExitStack) -> str:
    """Start the ModelProxy serving the local judge model; returns its base URL."""
    from termrl.llm.engines import make_engine
    from termrl.llm.proxy import ModelProxy

    engine = await asyncio.to_thread(make_engine, "transformers", config.local_judge_model)
    proxy = await stack.enter_async_context(ModelProxy(engine))
    return proxy.base_url


async def verify_tasks(tasks: list[Task], config: VerifyConfig) -> list[Verdict]:
    """Verify ``tasks`` (order kept), at most ``config.concurrency`` sandboxes alive at once."""
    async with AsyncExitStack() as stack:
        endpoints = config.judge_endpoints()
        if any(e.spec == LOCAL_JUDGE for e in endpoints) and config.model_proxy_url is None:
            url = await _local_proxy(config, stack)
            endpoints = [
                e if e.spec != LOCAL_JUDGE else type(e)(e.spec, e.model, url) for e in endpoints
            ]
        panel = None
        if endpoints:
            panel = JudgePanel(
                endpoints,
                rule=config.judge_aggregation,
                timeout_sec=config.judge_timeout_sec,
                max_tokens=config.judge_max_tokens,
                max_test_chars=config.judge_max_test_chars,
                concurrency=config.judge_concurrency,
            )
        # Checks queue for a slot as long as it takes: the slots are the only bound on sandboxes.
        manager = await stack.enter_async_context(
            SandboxManager(
                config.sandbox,
                max_sessions=config.concurrency,
                acquire_timeout_sec=math.inf,
            )
        )
        ctx = _Context(config, TaskSandboxes(manager), panel)
        in_flight = asyncio.Semaphore(config.concurrency)
        bar = tqdm(total=len(tasks), desc="verify", unit="task", disable=not config.progress)

        async def one(task: Task) -> Verdict:
            async with in_flight:
                verdict = await verify_task(ctx, task)
            bar.update(1)
            bar.set_postfix_str(f"{task.id}: {verdict.reason}")
            return verdict

        try:
            async with asyncio.TaskGroup() as group:
                running = [group.create_task(one(task)) for task in tasks]
        finally:
            bar.close()
        return [r.result() for r in running]
