"""What a task's tests say: the reward they wrote, or pytest's report — read so that no forged value passes.

Two rules (``termrl.taskrun.run_tests`` picks one by the task's ``scoring``):

- ``reward-file`` (Harbor): /logs/verifier/reward.txt, accepted only as a
  regular file (not a symlink, FIFO or directory) holding a finite number in
  [0, 1] (``parse_reward``); anything else is ``RewardFailed``, never a pass.
  Only when there is no such path at all does the script's exit status decide
  (0 → 1.0, else 0.0). Read from the host's copy of the verifier directory
  where the tests had one of their own (``read_host_reward``), else from inside
  the sandbox with bash builtins only (``read_sandbox_reward``).
- ``pytest-report`` (Terminal-Bench 1.0): passed when pytest's report lists at
  least one PASSED test and no FAILED or ERROR one (``parse_pytest_report``).
"""

from __future__ import annotations

import math
import os
import posixpath
import re
import stat
from typing import TYPE_CHECKING

from termrl.errors import RewardFailed

if TYPE_CHECKING:
    from termrl.sandbox.session import Session

__all__ = [
    "REWARD_FILE",
    "VERIFIER_DIR",
    "parse_pytest_report",
    "parse_reward",
    "read_host_reward",
    "read_sandbox_reward",
]

VERIFIER_DIR = "/logs/verifier"
REWARD_FILE = f"{VERIFIER_DIR}/reward.txt"

# Reads $f with bash builtins only; exit 3: no such path, 4: not a regular file (its kind printed).
REWARD_PROBE = """\
if [ -L "$f" ]; then echo symlink; exit 4; fi
[ -e "$f" ] || exit 3
if [ -d "$f" ]; then echo directory; exit 4; fi
if [ ! -f "$f" ]; then echo special file; exit 4; fi
IFS= read -r -d '' -n 256 text < "$f"
printf '%s' "$text"
"""

_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR)\b", re.MULTILINE)


def parse_pytest_report(output: str) -> bool:
    """Terminal-Bench 1.0's rule: at least one PASSED and no FAILED or ERROR line."""
    outcomes = _PYTEST_LINE.findall(output)
    return "PASSED" in outcomes and "FAILED" not in outcomes and "ERROR" not in outcomes


def parse_reward(task_id: str, text: str) -> float:
    """The reward a reward file states: a finite number in [0, 1], else ``RewardFailed``."""
    try:
        reward = float(text.strip())
    except ValueError as exc:
        raise RewardFailed(
            f"task {task_id}: {REWARD_FILE} holds {text[:80]!r}, not a number"
        ) from exc
    if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        raise RewardFailed(
            f"task {task_id}: {REWARD_FILE} holds {reward!r}, not a reward in [0, 1]"
        )
    return reward


async def read_sandbox_reward(session: Session, task_id: str, test_exit_code: int | None) -> float:
    """The reward file's value; the tests' exit status when there is no file at all (0 → 1.0)."""
    probe = await session.exec_fresh(f"f={REWARD_FILE}\n{REWARD_PROBE}", timeout=30)
    if probe.exit_code == 3:
        return 1.0 if test_exit_code == 0 else 0.0
    if probe.exit_code == 4:
        raise RewardFailed(
            f"task {task_id}: {REWARD_FILE} is a {probe.output.strip()}, not a regular file"
        )
    if probe.exit_code != 0:
        raise RewardFailed(
            f"task {task_id}: cannot read {REWARD_FILE}", log_tail=probe.output[-2000:]
        )
    return parse_reward(task_id, probe.output)


def read_host_reward(task_id: str, verifier: str, test_exit_code: int | None) -> float:
    """The reward file the tests wrote into the host's verifier directory (``read_sandbox_reward``'s rules)."""
    path = os.path.join(verifier, posixpath.basename(REWARD_FILE))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        if os.path.lexists(path):  # a dangling symlink
            raise RewardFailed(
                f"task {task_id}: {REWARD_FILE} is a symlink, not a regular file"
            ) from None
        return 1.0 if test_exit_code == 0 else 0.0
    except OSError as exc:  # ELOOP: a symlink
        kind = "symlink" if os.path.islink(path) else "special file"
        raise RewardFailed(
            f"task {task_id}: {REWARD_FILE} is a {kind}, not a regular file"
        ) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "directory" if stat.S_ISDIR(mode) else "special file"
            raise RewardFailed(f"task {task_id}: {REWARD_FILE} is a {kind}, not a regular file")
        text = os.read(fd, 256).decode(errors="replace")
    finally:
        os.close(fd)
    return parse_reward(task_id, text)
