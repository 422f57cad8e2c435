"""Mask & filter (the seed's rules), as pure functions over raw episode records.

    RolloutEpisode ──episode_verdict──► masked? placeholder? drop flag?
    groups' drop flags ──filter_groups(limit)──► which groups are dropped
    record + verdict + dropped ──episode_rows──► trajectories rows

Per episode, in order:

- Unrecoverable failure (``EnvInitFailed``, ``SandboxUnavailable``,
  ``ResetFailed``, ``RewardFailed``; an unclassified ``UnexpectedError`` is
  treated the same): one placeholder row — empty token lists, zero reward,
  ``masked`` and ``placeholder`` true — so the batch keeps its shape and the
  sample carries zero mask and zero advantage.
- Transient failure (``ExecTimeout``, ``SandboxDied``, ``NetworkError``) or a
  tool call that ran past its timeout: the episode carries the drop flag. An
  episode whose transient failure left it without a reward is also masked.
- Stopped at max turns without passing the tests: masked (``max-turns``), the
  seed's max-turn mask — a truncated failure says little about its actions, so it
  is not trained on; its reward still counts in its group's baseline (train's
  ``SCORED_MASKS``: the tests did score its last state). One
  that passed the tests stays: its outcome is known (the tests ran after the last
  turn), and small policies rarely call ``done``, so masking it would discard
  most of their positives.
- Failed with more response tokens than the limit (20k): masked
  (``long_failure``): a few extreme failures must not dominate an update.

Every row also carries the episode's behaviour ``shaping`` (``behaviour.py``;
0.0 when the penalties are off, and on a placeholder), beside its outcome
``reward``, which stays what the tests said.

Per group: a group with a drop-flagged episode is dropped whole (``drop`` on
all its rows) unless that would push the batch's dropped ratio past
``drop_ratio_limit`` (0.5). The seed's ``GroupFilterTB`` streams groups and
divides by the groups seen so far, which can never drop the first group; here
the whole batch is known, so the ratio is over the batch's groups, taken in
completion order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import termrl.errors as errors
from components.rollout.episode import RolloutEpisode

__all__ = [
    "EpisodeVerdict",
    "MaskFilterResult",
    "MaskRules",
    "apply_mask_filter",
    "classify_failure",
    "episode_rows",
    "episode_verdict",
    "filter_groups",
]

FailureClass = Literal["unrecoverable", "transient"]


@dataclass(frozen=True)
class MaskRules:
    """The knobs of mask & filter (``RolloutConfig`` fills them)."""

    drop_ratio_limit: float = 0.5
    max_failed_response_tokens: int = 20000
    mask_max_turns: bool = True


@dataclass(frozen=True)
class EpisodeVerdict:
    masked: bool
    mask_reason: str | None
    placeholder: bool
    drop_flag: bool


@dataclass
class MaskFilterResult:
    rows: list[dict[str, Any]]
    verdicts: dict[str, EpisodeVerdict]
    """Per episode id."""
    dropped_groups: list[str]
    stats: dict[str, float] = field(default_factory=dict)


def classify_failure(name: str | None) -> FailureClass | None:
    """``unrecoverable``, ``transient`` or None (no failure) for a stored failure type."""
    if name is None:
        return None
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, errors.TransientError):
        return "transient"
    # UnrecoverableError types, and anything unclassified: nothing usable came out.
    return "unrecoverable"


def episode_verdict(record: RolloutEpisode, rules: MaskRules) -> EpisodeVerdict:
    """Mask, placeholder and drop flag of one episode (before the group filter)."""
    kind = classify_failure(record.failure_type)
    drop_flag = kind == "transient" or record.timed_out_execs > 0
    if kind == "unrecoverable":
        return EpisodeVerdict(True, record.failure_type, True, drop_flag)
    if record.tampering:
        # Its reward may be forged: neither a success nor a failure to learn from.
        return EpisodeVerdict(True, "verifier_tampering", True, drop_flag)
    if not record.chunks:
        # Nothing was generated (a transient failure before the first turn).
        return EpisodeVerdict(True, record.failure_type or "empty", True, drop_flag)
    if kind == "transient" or not record.rewarded:
        return EpisodeVerdict(True, record.failure_type or "no-reward", False, drop_flag)
    if rules.mask_max_turns and record.stop_reason == "max-turns" and not record.success:
        return EpisodeVerdict(True, "max-turns", False, drop_flag)
    if not record.success and record.response_tokens > rules.max_failed_response_tokens:
        return EpisodeVerdict(True, "long_failure", False, drop_flag)
    return EpisodeVerdict(False, None, False, drop_flag)


def filter_groups(flags: Sequence[bool], limit: float) -> list[bool]:
    """Which groups to drop: flagged ones, in order, while dropped/total stays ≤ ``limit``."""
    total = len(flags)
    dropped = 0
    out: list[bool] = []
    for flagged in flags:
        drop = flagged and (dropped + 1) / total <= limit
        dropped += drop
        out.append(drop)
    return out


def episode_rows(
    record: RolloutEpisode, verdict: EpisodeVerdict, dropped: bool, shaping: float = 0.0
) -> list[dict[str, Any]]:
    """The trajectories rows of one episode (one per chunk; one placeholder row)."""
    episode = {
        "episode_id": record.ids.episode_id,
        "group_id": record.ids.group_id,
        "task_id": record.task_id,
        "policy_version": record.policy_version,
        "mode": record.mode,
        "source": "policy",
        "anchor": record.ids.anchor,
        "reward": 0.0 if verdict.placeholder else record.reward,
        "shaping": 0.0 if verdict.placeholder else shaping,
        "success": False if verdict.placeholder else record.success,
        "stop_reason": record.stop_reason,
        "failure_type": record.failure_type,
        "masked": verdict.masked,
        "mask_reason": verdict.mask_reason,
        "drop": dropped,
        "placeholder": verdict.placeholder,
        "trainable": record.trainable and not verdict.placeholder,
        "num_chunks": 0 if verdict.placeholder else len(record.chunks),
        "episode_tokens": 0 if verdict.placeholder else record.episode_tokens,
    }
    if verdict.placeholder:
        empty = {"chunk_index": 0, "prompt_ids": [], "response_ids": [], "response_logprobs": []}
        return [{**empty, **episode}]
    return [{**chunk, **episode} for chunk in record.chunks]


def apply_mask_filter(
    groups: Sequence[Sequence[RolloutEpisode]],
    rules: MaskRules,
    shaping: Mapping[str, float] | None = None,
) -> MaskFilterResult:
    """Mask every episode, filter the groups (in the given order) and build the rows.

    ``shaping`` is each episode's behaviour shaping by id (none given: 0.0 for all)."""
    shaping = shaping or {}
    verdicts = {r.ids.episode_id: episode_verdict(r, rules) for g in groups for r in g}
    flags = [any(verdicts[r.ids.episode_id].drop_flag for r in g) for g in groups]
    dropped = filter_groups(flags, rules.drop_ratio_limit)
    rows: list[dict[str, Any]] = []
    dropped_ids: list[str] = []
    for group, drop in zip(groups, dropped, strict=True):
        if drop and group:
            dropped_ids.append(group[0].ids.group_id)
        for record in sorted(group, key=lambda r: r.ids.episode_index):
            rows.extend(
                episode_rows(
                    record,
                    verdicts[record.ids.episode_id],
                    drop,
                    shaping.get(record.ids.episode_id, 0.0),
                )
            )
    reasons = Counter(v.mask_reason for v in verdicts.values() if v.masked)
    shaped = [r["shaping"] for r in rows if r["chunk_index"] == 0]  # one per episode, as written
    stats: dict[str, float] = {
        "groups": float(len(groups)),
        "groups_flagged": float(sum(flags)),
        "groups_dropped": float(sum(dropped)),
        "episodes": float(len(verdicts)),
        "episodes_masked": float(sum(v.masked for v in verdicts.values())),
        "episodes_placeholder": float(sum(v.placeholder for v in verdicts.values())),
        "episodes_drop_flag": float(sum(v.drop_flag for v in verdicts.values())),
        "episodes_shaped": float(sum(value != 0.0 for value in shaped)),
        "shaping_mean": sum(shaped) / len(shaped) if shaped else 0.0,
    }
    stats.update({f"mask/{reason}": float(n) for reason, n in sorted(reasons.items())})
    return MaskFilterResult(rows, verdicts, dropped_ids, stats)
