"""What an episode did that its outcome reward does not see, and the shaping penalty for it.

    RolloutEpisode ──episode_commands──► (command, exit code, timed out) of each bash call
                  ──behaviour_flags(loop_repeats)──► BehaviourFlags(loop, destructive, test_access)
    BehaviourFlags ──Penalties.shaping──► shaping ≤ 0, recorded beside the outcome reward

What counts as:

- a retry loop: the same command with the same failing result (a nonzero or
  missing exit status, or a timeout) ``loop_repeats`` times in a row; a
  command that keeps succeeding (polling a job with ``ls``) is not one;
- a destructive command: killing every process (``kill -9 -1``, ``killall5``,
  ``pkill``/``killall`` without a narrow target), ``rm -rf`` of ``/`` or a
  system path, ``mkfs``, ``dd`` onto a device, a fork bomb, shutdown/reboot;
- a test access: any command naming the test or solution locations
  (``/tests``, ``/solution``, ``test.sh``, ``solve.sh``, ``/logs/verifier``,
  ``reward.txt``) — they are absent while the agent works, so any mention is
  an attempt to find them.

The flags are computed once per episode (``behaviour_by_episode``) and read by
both the monitor (counts and alerts) and the shaping penalties. Shaping is off
by default (every weight 0); it is stored in its own trajectories column, so
the outcome reward stays what the tests said, and eval never computes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for hints: RolloutConfig imports Penalties, and must stay light to import
    from components.rollout.episode import RolloutEpisode

__all__ = [
    "BehaviourFlags",
    "Penalties",
    "behaviour_by_episode",
    "episode_return",
    "behaviour_flags",
    "episode_commands",
    "has_loop",
    "is_destructive",
    "is_test_access",
]

Command = tuple[str, int | None, bool]
"""(command, exit code, timed out) of one bash call."""

_SYSTEM = (
    r"/(?:\*|bin|boot|dev|etc|home|lib\w*|opt|proc|root|sbin|srv|sys|usr|var|app)?/?(?:\s|$|;|&|\|)"
)
_DESTRUCTIVE = [
    re.compile(r"\bkill\s+(?:-s\s*\w+\s+|-\w+\s+)*-1\b"),  # kill -9 -1: every process
    re.compile(r"\bkillall5\b"),
    re.compile(r"\b(?:pkill|killall)\s+(?:-\w+\s+)*(?:-u\s*\w+|\.|bash|sh|python\S*)(?:\s|$)"),
    re.compile(
        r"\brm\s+(?:-\w*\s+)*-\w*[rR]\w*\s+(?:-\S+\s+)*(?:--no-preserve-root\s+)?" + _SYSTEM
    ),
    re.compile(r"\brm\s+(?:-\w+\s+)*--recursive\b.*\s" + _SYSTEM),
    re.compile(r"\bmkfs(?:\.\w+)?\b"),
    re.compile(r"\bdd\b[^|;&]*\bof=/dev/(?!null\b)"),
    re.compile(r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"),
    re.compile(r"\b(?:shutdown|reboot|halt|poweroff)\b"),
    re.compile(r"\bchmod\s+(?:-\w+\s+)*-R\s+\S+\s+/(?:\s|$)"),
]
_TEST_ACCESS = re.compile(
    r"(?:^|[\s'\"=:(;|&<>])/(?:tests|solution)(?:/|\b)|\btest\.sh\b|\bsolve\.sh\b"
    r"|/logs/verifier|\breward\.txt\b"
)


@dataclass(frozen=True)
class BehaviourFlags:
    """The bad patterns one episode showed."""

    loop: bool
    destructive: bool
    test_access: bool


@dataclass(frozen=True)
class Penalties:
    """Weight of each behaviour penalty, against an outcome reward of 1 (``RolloutConfig`` fills them)."""

    loop: float = 0.0
    destructive: float = 0.0
    test_access: float = 0.0

    def shaping(self, flags: BehaviourFlags) -> float:
        """−(loop·[loop] + destructive·[destructive] + test_access·[test access])."""
        penalty = (
            self.loop * flags.loop
            + self.destructive * flags.destructive
            + self.test_access * flags.test_access
        )
        return -penalty if penalty else 0.0  # a plain 0.0, not -0.0, for an unpenalised episode


def is_destructive(command: str) -> bool:
    return any(p.search(command) for p in _DESTRUCTIVE)


def is_test_access(command: str) -> bool:
    return bool(_TEST_ACCESS.search(command))


def episode_commands(record: RolloutEpisode) -> list[Command]:
    """(command, exit code, timed out) of every bash call: the exec log, else the actions
    (cli-native mode, where the agent CLI ran the commands itself)."""
    if record.execs:
        return [(e.command, e.exit_code, e.timed_out) for e in record.execs]
    out: list[Command] = []
    for chunk in record.chunks:
        calls = [c for c in json.loads(chunk.get("action") or "[]") if c.get("name") == "bash"]
        for i, call in enumerate(calls):
            exit_code = chunk.get("exit_code") if i == len(calls) - 1 else None
            out.append((str(call.get("arguments", {}).get("command", "")), exit_code, False))
    return out


def has_loop(commands: Sequence[Command], repeats: int) -> bool:
    """The same failing call (command, exit code, timeout) ``repeats`` times in a row."""
    run = 0
    for i, call in enumerate(commands):
        _command, exit_code, timed_out = call
        failing = timed_out or exit_code != 0
        run = run + 1 if failing and i and call == commands[i - 1] else int(failing)
        if run >= repeats:
            return True
    return False


def behaviour_flags(record: RolloutEpisode, loop_repeats: int) -> BehaviourFlags:
    commands = episode_commands(record)
    return BehaviourFlags(
        loop=has_loop(commands, loop_repeats),
        destructive=any(is_destructive(c) for c, _, _ in commands),
        test_access=any(is_test_access(c) for c, _, _ in commands),
    )


def episode_return(penalties: Penalties, loop_repeats: int) -> Callable[[RolloutEpisode], float]:
    """What train's advantages see of an episode: its outcome reward plus its behaviour shaping."""
    if not (penalties.loop or penalties.destructive or penalties.test_access):
        return lambda record: record.reward  # shaping off: no need to read the commands
    return lambda record: record.reward + penalties.shaping(behaviour_flags(record, loop_repeats))


def behaviour_by_episode(
    groups: Sequence[Sequence[RolloutEpisode]], loop_repeats: int
) -> dict[str, BehaviourFlags]:
    """Episode id → its flags, over a batch of groups."""
    return {r.ids.episode_id: behaviour_flags(r, loop_repeats) for g in groups for r in g}
