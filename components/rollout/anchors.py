"""Chunk-initialized resampling: where each group starts in its task's demonstration.

A task's demonstration τ* = (c*₁ … c*_K) is an expert trajectory (the
demonstrate stage's artifact; any trajectories with ``source = expert``). A group
at anchor k replays c*₁ … c*ₖ₋₁ and the policy samples the rest, so a task the
policy never solves from scratch still yields successes from late anchors.
Anchor 1 is an ordinary episode. Two ways to pick anchors (IPA, arXiv 2512.24873
§3.2.4):

    parallel   a task's groups spread over 1 … K: its v-th group starts at anchor
               1 + (v + offset) mod K, the offset drawn per task from the rollout
               seed, so one batch covers every anchor as evenly as its groups allow
    rollback   per task, one anchor for all its groups; it starts at K (only the
               last expert command left to the policy) and moves one chunk earlier
               once the success rate from it reaches ``threshold``. The state
               (task id → anchor) is a small JSON file carried between iterations.

K counts the demonstration's command turns: its closing ``done`` call is not an
anchor, because after the full expert prefix the task is already solved and a
group started there succeeds whatever the policy does (a group of equal rewards
carries no signal). Tasks without a demonstration always start at anchor 1, and
so does a one-command demonstration. So does a multi-step task (Harbor's
``[[steps]]``): its episode moves from step to step only once a step's tests
scored it, which a replayed prefix of one demonstration cannot stand in for
(the demonstrate stage makes none for such a task).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from termrl.artifacts.tasks import Task
from termrl.artifacts.trajectories import read_trajectories

__all__ = [
    "ANCHORINGS",
    "anchor_picker",
    "load_demonstrations",
    "next_rollback_state",
    "read_state",
    "write_state",
]

ANCHORINGS = ("none", "parallel", "rollback")


def load_demonstrations(path: str | Path) -> dict[str, list[str]]:
    """Task id → the expert response texts of its demonstration's command turns, in order.

    The closing ``done`` turn is dropped: no group starts after it (see above).
    """
    table = read_trajectories(path)
    rows = [r for r in table.to_pylist() if r.get("source") == "expert" and r.get("response_text")]
    by_episode: dict[str, list[dict]] = {}
    for row in rows:
        by_episode.setdefault(row["episode_id"], []).append(row)
    demonstrations: dict[str, list[str]] = {}
    for episode in by_episode.values():
        episode.sort(key=lambda r: r["chunk_index"])
        if len(episode) > 1 and _only_done(episode[-1].get("action")):
            episode = episode[:-1]
        texts = [r["response_text"] for r in episode]
        task = episode[0]["task_id"]
        if task not in demonstrations or len(texts) < len(demonstrations[task]):  # the shortest one
            demonstrations[task] = texts
    return demonstrations


def _only_done(action: str | None) -> bool:
    """Whether a chunk's parsed action (JSON list of calls) is a lone ``done`` call."""
    try:
        calls = json.loads(action or "")
    except ValueError:
        return False
    return (
        isinstance(calls, list)
        and len(calls) == 1
        and isinstance(calls[0], dict)
        and calls[0].get("name") == "done"
    )


def read_state(path: str | Path | None) -> dict[str, int]:
    """The rollback state (task id → anchor); empty when there is none yet."""
    if path is None or not Path(path).is_file() or not Path(path).read_text().strip():
        return {}
    return {str(k): int(v) for k, v in json.loads(Path(path).read_text()).items()}


def write_state(path: str | Path, state: Mapping[str, int]) -> None:
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(json.dumps(dict(sorted(state.items())), indent=1))
    tmp.replace(path)


def anchor_picker(
    anchoring: str,
    demonstrations: Mapping[str, Sequence[str]],
    *,
    seed: int,
    state: Mapping[str, int],
) -> Callable[[int, Task], int]:
    """``anchor_for(visit, task)`` for ``anchoring`` (one of ``ANCHORINGS``); ``visit`` counts the
    task's earlier groups in this rollout (0 for its first)."""
    if anchoring not in ANCHORINGS:
        raise ValueError(f"anchoring must be one of {', '.join(ANCHORINGS)}, not {anchoring!r}")

    def anchor_for(visit: int, task: Task) -> int:
        chunks = len(demonstrations.get(task.id, ()))
        if anchoring == "none" or chunks == 0 or task.steps:
            return 1
        if anchoring == "parallel":
            offset = random.Random(f"anchor:{seed}:{task.id}").randrange(chunks)
            return 1 + (visit + offset) % chunks
        return min(max(state.get(task.id, chunks), 1), chunks)

    return anchor_for


def next_rollback_state(
    state: Mapping[str, int],
    outcomes: Sequence[tuple[str, int, bool]],
    demonstrations: Mapping[str, Sequence[str]],
    *,
    threshold: float,
) -> dict[str, int]:
    """Move each task's anchor one chunk earlier where the success rate from it reached ``threshold``.

    ``outcomes``: (task id, anchor, success) per scored episode of this rollout.
    """
    new = {task: len(chunks) for task, chunks in demonstrations.items() if chunks} | dict(state)
    tried: dict[str, list[bool]] = {}
    for task, anchor, success in outcomes:
        if task in new and anchor == new[task]:
            tried.setdefault(task, []).append(success)
    for task, successes in tried.items():
        if sum(successes) / len(successes) >= threshold:
            new[task] = max(1, new[task] - 1)
    return new
