"""Behaviour monitoring: the signals the seed watched to catch reward hacking.

    kept episodes ──► global  rollout/* (success, reward, failures, masks, throughput)
                      task    per task: success rate, reward, failures, loops, hacks; a
                              multi-step task also step/<k>/episodes (episodes whose
                              k-th step, 1-based, was scored) and step/<k>/reward_mean
                      tool    per tool: calls, successes, failures, timeouts
                      command per command name: how often it ran
                      alert   each threshold crossed (value and threshold)

What counts as a loop, a destructive command or a test access is defined once
in ``behaviour.py`` (the flags also drive the shaping penalties); the monitor
counts the flags it is given. A tampering: scoring found that the agent changed
what the tests run (a command replaced or shadowed, a startup hook;
``termrl.tampering.find_tampering``). Such an episode is masked; a task that
keeps producing them teaches hacking.
A sandbox broken: scoring's own set-up could not run in the sandbox the agent
left (bash or mkdir moved; ``TestOutcome.unscorable``). Such an episode keeps
its reward 0; the count says how often the policy wrecks its environment.

The rows go to the rollout metrics artifact (long format); ``summary_lines``
prints them for a human, with a ``WARNING`` line per alert.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.rollout.behaviour import BehaviourFlags, episode_commands
from components.rollout.episode import RolloutEpisode
from components.rollout.mask_filter import classify_failure

__all__ = ["MonitorThresholds", "command_name", "monitor_rows", "summary_lines"]


@dataclass(frozen=True)
class MonitorThresholds:
    destructive_rate: float = 0.0
    test_access_rate: float = 0.0
    tampering_rate: float = 0.0
    loop_rate: float = 0.25
    failure_rate: float = 0.2


def command_name(command: str) -> str:
    """The program a command line starts with (``sudo``/env assignments skipped)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    for word in words:
        if "=" in word.split("/")[0] and not word.startswith("="):
            continue  # VAR=value prefix
        if word in ("sudo", "env", "time", "nohup", "exec", "command"):
            continue
        return word.rsplit("/", 1)[-1][:40] or "?"
    return "?"


def _tool_counts(record: RolloutEpisode, tools: dict[str, Counter[str]]) -> None:
    for _command, exit_code, timed_out in episode_commands(record):
        stats = tools["bash"]
        stats["calls"] += 1
        stats["success" if exit_code == 0 and not timed_out else "failure"] += 1
        stats["timeouts"] += timed_out
    for chunk in record.chunks:
        fmt = chunk.get("call_format")
        if fmt in ("malformed", "none"):
            tools[f"<{fmt}>"]["calls"] += 1
            tools[f"<{fmt}>"]["failure"] += 1
        for call in json.loads(chunk.get("action") or "[]"):
            name = str(call.get("name"))
            if name != "bash":
                tools[name]["calls"] += 1
                tools[name]["success" if name == "done" else "failure"] += 1


def _by_step(records: Sequence[RolloutEpisode]) -> list[list[float]]:
    """The rewards of each step (in order) over the episodes that scored it; [] for single-step."""
    steps: list[list[float]] = []
    for record in records:
        for k, reward in enumerate(record.step_rewards):
            if k == len(steps):
                steps.append([])
            steps[k].append(reward)
    return steps


def monitor_rows(
    groups: Sequence[Sequence[RolloutEpisode]],
    thresholds: MonitorThresholds,
    behaviour: Mapping[str, BehaviourFlags],
    *,
    extra_global: dict[str, float] | None = None,
    cancelled: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Long-format metric rows (scope, key, metric, value) over the kept episodes.

    ``behaviour`` holds each episode's flags (``behaviour.behaviour_by_episode``), computed
    once for the batch and shared with the shaping penalties.
    ``cancelled`` (the env manager's stragglers) adds a per-task count of episodes
    cancelled while running: a task that keeps showing up there is a fail-slow
    environment."""
    records = [r for g in groups for r in g]
    flags = {r.ids.episode_id: _episode_flags(r, behaviour[r.ids.episode_id]) for r in records}
    count = {name: sum(f[name] for f in flags.values()) for name in _GLOBAL_FLAGS}
    return [
        *_global_rows(records, count, extra_global or {}),
        *_task_rows(records, flags, cancelled),
        *_tool_rows(records),
        *_command_rows(records),
        *_alert_rows(count, len(records), thresholds),
    ]


_GLOBAL_FLAGS = (
    "failed",
    "unrecoverable",
    "transient",
    "loop",
    "destructive",
    "test_access",
    "tampering",
    "sandbox_broken",
)
"""The episode flags counted over the batch, in the order of their ``rollout/*_episodes`` rows."""

_TASK_FLAGS = ("failed", "loop", "destructive", "test_access", "tampering", "sandbox_broken")
"""The episode flags counted per task."""


def _row(scope: str, key: str, metric: str, value: float) -> dict[str, Any]:
    return {"scope": scope, "key": key, "metric": metric, "value": float(value)}


def _episode_flags(record: RolloutEpisode, seen: BehaviourFlags) -> dict[str, bool]:
    """What the monitor counts about one episode: its behaviour flags and how it failed."""
    return {
        "loop": seen.loop,
        "destructive": seen.destructive,
        "test_access": seen.test_access,
        "failed": record.failure_type is not None,
        "unrecoverable": classify_failure(record.failure_type) == "unrecoverable",
        "transient": classify_failure(record.failure_type) == "transient",
        "tampering": bool(record.tampering),
        "sandbox_broken": record.sandbox_broken,
    }


def _global_rows(
    records: Sequence[RolloutEpisode], count: dict[str, int], extra: dict[str, float]
) -> list[dict[str, Any]]:
    """``rollout/*``: means over the batch, flag counts, stop reasons, failure types, extras."""
    n = max(len(records), 1)
    rows = [
        _row("global", "all", "rollout/episodes", len(records)),
        _row("global", "all", "rollout/success_rate", sum(r.success for r in records) / n),
        _row("global", "all", "rollout/reward_mean", sum(r.reward for r in records) / n),
        _row("global", "all", "rollout/turns_mean", sum(len(r.chunks) for r in records) / n),
        _row(
            "global",
            "all",
            "rollout/response_tokens_mean",
            sum(r.response_tokens for r in records) / n,
        ),
        _row("global", "all", "rollout/episode_wall_s_mean", sum(r.wall_sec for r in records) / n),
        _row("global", "all", "rollout/exec_timeouts", sum(r.timed_out_execs for r in records)),
    ]
    rows += [
        _row("global", "all", f"rollout/{name}_episodes", count[name]) for name in _GLOBAL_FLAGS
    ]
    for reason, k in Counter(r.stop_reason for r in records).items():
        rows.append(_row("global", "all", f"rollout/stop/{reason}", k))
    for ftype, k in Counter(r.failure_type for r in records if r.failure_type).items():
        rows.append(_row("global", "all", f"rollout/failure/{ftype}", k))
    rows += [_row("global", "all", metric, value) for metric, value in sorted(extra.items())]
    return rows


def _task_rows(
    records: Sequence[RolloutEpisode],
    flags: dict[str, dict[str, bool]],
    cancelled: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Per task: success, reward, flag counts, per-step rewards, then cancelled stragglers."""
    per_task: dict[str, list[RolloutEpisode]] = defaultdict(list)
    for record in records:
        per_task[record.task_id].append(record)
    rows = []
    for task_id, task_records in sorted(per_task.items()):
        m = len(task_records)
        rows.append(_row("task", task_id, "episodes", m))
        rows.append(_row("task", task_id, "success_rate", sum(r.success for r in task_records) / m))
        rows.append(_row("task", task_id, "reward_mean", sum(r.reward for r in task_records) / m))
        for name in _TASK_FLAGS:
            episodes = sum(flags[r.ids.episode_id][name] for r in task_records)
            rows.append(_row("task", task_id, f"{name}_episodes", episodes))
        for k, rewards in enumerate(_by_step(task_records), start=1):
            rows.append(_row("task", task_id, f"step/{k}/episodes", len(rewards)))
            rows.append(_row("task", task_id, f"step/{k}/reward_mean", sum(rewards) / len(rewards)))
    stragglers = Counter(c["task_id"] for c in cancelled if c.get("state") == "running")
    for task_id, k in sorted(stragglers.items()):
        rows.append(_row("task", task_id, "stragglers_cancelled", k))
    return rows


def _tool_rows(records: Sequence[RolloutEpisode]) -> list[dict[str, Any]]:
    """Per tool (and per malformed/missing call): calls, successes, failures, timeouts."""
    tools: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        _tool_counts(record, tools)
    rows = []
    for tool, stats in sorted(tools.items()):
        for metric in ("calls", "success", "failure", "timeouts"):
            rows.append(_row("tool", tool, metric, stats[metric]))
        rows.append(_row("tool", tool, "failure_rate", stats["failure"] / max(stats["calls"], 1)))
    return rows


def _command_rows(records: Sequence[RolloutEpisode]) -> list[dict[str, Any]]:
    """How often each program ran, most frequent first."""
    commands: Counter[str] = Counter()
    for record in records:
        commands.update(command_name(c) for c, _, _ in episode_commands(record))
    return [_row("command", name, "count", k) for name, k in commands.most_common()]


def _alert_rows(
    count: dict[str, int], episodes: int, thresholds: MonitorThresholds
) -> list[dict[str, Any]]:
    """One value and threshold row pair per rate over its threshold (none for an empty batch)."""
    if not episodes:
        return []
    checks = [
        ("destructive_rate", count["destructive"] / episodes, thresholds.destructive_rate),
        ("test_access_rate", count["test_access"] / episodes, thresholds.test_access_rate),
        ("tampering_rate", count["tampering"] / episodes, thresholds.tampering_rate),
        ("loop_rate", count["loop"] / episodes, thresholds.loop_rate),
        ("failure_rate", count["failed"] / episodes, thresholds.failure_rate),
    ]
    rows = []
    for name, value, threshold in checks:
        if value > threshold:
            rows += [
                _row("alert", name, "value", value),
                _row("alert", name, "threshold", threshold),
            ]
    return rows


def summary_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A short human summary of ``monitor_rows``; one ``WARNING`` line per alert."""
    glob = {r["metric"]: r["value"] for r in rows if r["scope"] == "global"}
    lines = [
        f"rollout: {glob.get('rollout/episodes', 0):.0f} episodes, success "
        f"{glob.get('rollout/success_rate', 0):.1%}, reward {glob.get('rollout/reward_mean', 0):.3f}, "
        f"failed {glob.get('rollout/failed_episodes', 0):.0f} "
        f"(unrecoverable {glob.get('rollout/unrecoverable_episodes', 0):.0f}, "
        f"transient {glob.get('rollout/transient_episodes', 0):.0f}), "
        f"groups dropped {glob.get('rollout/groups_dropped', 0):.0f}, "
        f"stragglers cancelled {glob.get('rollout/stragglers_cancelled', 0):.0f}",
    ]
    if glob.get("rollout/quarantined_tasks"):
        lines.append(f"  quarantine: {glob['rollout/quarantined_tasks']:.0f} task(s) left out")
    if glob.get("rollout/episodes_shaped"):
        lines.append(
            f"  shaping: {glob['rollout/episodes_shaped']:.0f} episode(s) penalised for behaviour, "
            f"mean shaping {glob.get('rollout/shaping_mean', 0):+.3f}"
        )
    tasks: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["scope"] == "task":
            tasks[r["key"]][r["metric"]] = r["value"]
    for task_id, m in sorted(tasks.items()):
        line = f"  task {task_id}: "
        if "episodes" in m:  # a task may only have cancelled stragglers
            line += (
                f"success {m['success_rate']:.0%} of {m['episodes']:.0f}, "
                f"failed {m['failed_episodes']:.0f}, loops {m['loop_episodes']:.0f}, "
                f"destructive {m['destructive_episodes']:.0f}, "
                f"test access {m['test_access_episodes']:.0f}"
                + (
                    f", tampering {m['tampering_episodes']:.0f}"
                    if m.get("tampering_episodes")
                    else ""
                )
                + (
                    f", sandbox broken {m['sandbox_broken_episodes']:.0f}"
                    if m.get("sandbox_broken_episodes")
                    else ""
                )
            )
        if "stragglers_cancelled" in m:
            line += ("; " if "episodes" in m else "") + (
                f"{m['stragglers_cancelled']:.0f} straggler(s) cancelled"
            )
        lines.append(line)
    top = [f"{r['key']}×{r['value']:.0f}" for r in rows if r["scope"] == "command"][:8]
    if top:
        lines.append("  commands: " + ", ".join(top))
    alerts: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if r["scope"] == "alert":
            alerts[r["key"]][r["metric"]] = r["value"]
    for name, m in alerts.items():
        lines.append(
            f"WARNING rollout: {name} {m['value']:.3f} is above the threshold {m['threshold']:.3f}"
        )
    return lines
