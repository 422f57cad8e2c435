"""From the trajectories artifact to per-episode token streams the trainer can batch.

One row of the artifact is one chunk; an episode's token stream is the
concatenation, in ``chunk_index`` order, of each chunk's ``prompt_ids`` and
``response_ids``. Only response tokens are trained:

    tokens       [p p p p | r r r | p p | r r r r | ...]
    token_chunk  [-1 ...  | 0 0 0 | -1  | 1 1 1 1 | ...]   (-1: not trained)
    mu_logprobs  [  .     | μ μ μ |  .  | μ μ μ μ | ...]   (NaN where unknown)

Demonstrations (``source: expert``) and chunk-initialized resampling mark the
chunks nobody sampled: an expert episode is replayed whole, and a policy
episode started from anchor k replays its first k−1 chunks. A replayed chunk
has no μ (NaN: no inference policy produced it), so the mismatch mask never
looks at it, and ``chunk_replayed`` keeps it out of the RL loss.

Episodes that cannot teach anything are excluded up front, each with its
reason (the trainer counts them in the metrics as ``mask/<reason>``):

    placeholder   rollout could not produce a sample (env init failed, ...)
    drop          its group was dropped for a transient failure
    <mask_reason> rollout's mask & filter masked it (its ``mask_reason``, else ``masked``);
                  ``long_failure`` (a failure past the seed's 20k response tokens) is decided
                  there, once, and still counts in its group's baseline: its reward is real
    untrainable   rollout flagged it not trainable
    too_long      the token stream does not fit the model's context
    empty         no response tokens at all

and two the trainer adds when a term of the objective is switched off:

    imitation_off a demonstration, while il_weight is 0
    rl_off        a policy episode, while rl_weight is 0

Behaviour shaping (``shaping``: rollout's penalties for retry loops, destructive
commands, test access; ≤ 0) is read beside the outcome reward; the group
advantage is taken on their sum (``TrainEpisode.shaped_reward``). A file written
before the column existed, and a demonstration, has none: 0.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
import torch
from torch import Tensor

from termrl.artifacts.trajectories import read_trajectories
from termrl.errors import ArtifactError

__all__ = ["SCORED_MASKS", "SOURCES", "TrainEpisode", "exclusion_counts", "load_episodes"]

_COLUMNS = [
    "episode_id",
    "group_id",
    "task_id",
    "chunk_index",
    "prompt_ids",
    "response_ids",
    "response_logprobs",
    "reward",
    "shaping",
    "success",
    "masked",
    "mask_reason",
    "drop",
    "placeholder",
    "trainable",
    "source",
    "replayed",
    "anchor",
]

SOURCES = ("policy", "expert")

SCORED_MASKS = ("long_failure", "max-turns")
"""Rollout mask reasons (``components/rollout/mask_filter.py``) of episodes whose tests ran as
usual: not trained on, but their reward belongs to their group's baseline. An over-long
failure is still a failure, and so is one that ran out of turns: the tests scored its last
state. Leaving them out of the baseline would turn a group of three successes and one
truncated failure into a uniform group, and the successes would teach nothing."""


@dataclass
class TrainEpisode:
    """One episode as the trainer sees it (read from the trajectories artifact)."""

    episode_id: str
    group_id: str
    task_id: str
    reward: float
    """The outcome reward (the tests' verdict); the imitation loss weighs demonstrations by it."""
    success: bool
    input_ids: Tensor
    """[T] the whole token stream."""
    token_chunk: Tensor
    """[T] chunk index of each token, -1 for tokens that are not trained (prompts)."""
    mu_logprobs: Tensor
    """[T] the inference engine's log-probability of each token (NaN where unknown)."""
    num_chunks: int
    response_tokens: int
    source: str = "policy"
    """``policy`` (sampled by the policy) or ``expert`` (a demonstration: imitation only)."""
    anchor: int = 1
    """1-based chunk where policy sampling started (1: from scratch)."""
    shaping: float = 0.0
    """Rollout's behaviour-shaping reward (≤ 0); 0 for a demonstration or an older artifact."""
    chunk_replayed: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.bool))
    """[C] whether each chunk was replayed from a demonstration rather than sampled."""
    exclusion: str | None = None
    """Why the episode contributes nothing, or ``None`` if it may train."""
    rollout_valid: bool = True
    """Whether rollout produced a real outcome; only these enter group statistics
    (an over-long failure still has a real reward that belongs to its group's baseline)."""
    advantage: float = 0.0
    """Group-normalised outcome advantage (filled by the trainer)."""
    chunk_advantages: Tensor = field(default_factory=lambda: torch.zeros(0))
    """[C] advantage of each chunk after discounting and the mode's weighting."""
    chunk_keep: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.bool))
    """[C] whether each chunk enters the RL loss (sampled, mode, mismatch)."""
    chunk_imitate: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.bool))
    """[C] whether each chunk enters the imitation loss (the chunks of a demonstration)."""
    chunk_mismatch: Tensor = field(default_factory=lambda: torch.zeros(0))
    """[C] mean |log π_old − log μ| per chunk (NaN where μ is unknown)."""
    old_logprobs: Tensor = field(default_factory=lambda: torch.zeros(0))
    """[R] π_old of each trained token, in stream order (filled by the trainer)."""

    @property
    def is_expert(self) -> bool:
        return self.source == "expert"

    @property
    def shaped_reward(self) -> float:
        """What the group advantage is computed from: the outcome reward plus the shaping."""
        return self.reward + self.shaping

    @property
    def chunk_tokens(self) -> Tensor:
        """[C] number of trained tokens in each chunk."""
        trained = self.token_chunk[self.token_chunk >= 0]
        return torch.bincount(trained, minlength=self.num_chunks)


def _episode_from_rows(rows: list[dict]) -> TrainEpisode:
    rows.sort(key=lambda r: r["chunk_index"])
    first = rows[0]
    source = first["source"] or "policy"
    if source not in SOURCES:
        raise ArtifactError(
            f"episode {first['episode_id']}: source {source!r} is not one of {', '.join(SOURCES)}"
        )
    anchor = first["anchor"] or 1
    ids: list[int] = []
    chunk: list[int] = []
    mu: list[float] = []
    replayed: list[bool] = []
    for position, row in enumerate(rows):
        prompt, response, logprobs = (
            row["prompt_ids"],
            row["response_ids"],
            row["response_logprobs"],
        )
        if logprobs and len(logprobs) != len(response):
            raise ArtifactError(
                f"episode {first['episode_id']} chunk {row['chunk_index']}: "
                f"{len(logprobs)} response_logprobs for {len(response)} response_ids"
            )
        # the anchor implies the flag, so a writer that sets only one still keeps RL off the replay
        replayed.append(source == "expert" or bool(row["replayed"]) or position < anchor - 1)
        ids += prompt
        chunk += [-1] * len(prompt)
        mu += [math.nan] * len(prompt)
        ids += response
        chunk += [position] * len(response)
        mu += list(logprobs) if logprobs and not replayed[-1] else [math.nan] * len(response)
    if chunk and chunk[0] >= 0:
        chunk[0] = -1  # nothing precedes the first token, so nothing predicts it
    token_chunk = torch.tensor(chunk, dtype=torch.long)
    exclusion = _rollout_exclusion(first)
    return TrainEpisode(
        episode_id=first["episode_id"],
        group_id=first["group_id"],
        task_id=first["task_id"],
        reward=float(first["reward"]),
        success=bool(first["success"]),
        input_ids=torch.tensor(ids, dtype=torch.long),
        token_chunk=token_chunk,
        mu_logprobs=torch.tensor(mu, dtype=torch.float32),
        num_chunks=len(rows),
        response_tokens=int((token_chunk >= 0).sum()),
        source=source,
        anchor=anchor,
        # a demonstration's reward is a given, not the policy's behaviour: nothing to shape
        shaping=0.0 if source == "expert" else float(first["shaping"] or 0.0),
        chunk_replayed=torch.tensor(replayed, dtype=torch.bool),
        exclusion=exclusion,
        rollout_valid=exclusion is None or exclusion in SCORED_MASKS,
    )


def _rollout_exclusion(row: dict) -> str | None:
    if row["placeholder"]:
        return "placeholder"
    if row["drop"]:
        return "drop"
    if row["masked"]:
        return row["mask_reason"] or "masked"
    if not row["trainable"]:
        return "untrainable"
    return None


def load_episodes(
    path: str | os.PathLike,
    *,
    max_episode_tokens: int,
    demonstrations: str | os.PathLike | None = None,
) -> list[TrainEpisode]:
    """Read the artifact(s) and build every episode (excluded ones included, with a reason).

    ``demonstrations`` is an optional second trajectories artifact (the demonstrate
    stage's expert episodes). Episodes come back sorted by id so every process of a
    distributed run, and a resumed run, sees the same order.
    """
    by_episode: dict[str, list[dict]] = {}
    for source in [path] + ([demonstrations] if demonstrations else []):
        table: pa.Table = read_trajectories(source).select(_COLUMNS)
        rows_here: dict[str, list[dict]] = {}
        for row in table.to_pylist():
            rows_here.setdefault(row["episode_id"], []).append(row)
        repeated = sorted(set(rows_here) & set(by_episode))
        if repeated:
            raise ArtifactError(
                f"{source}: episode id {repeated[0]!r} (and {len(repeated) - 1} more) is also in {path}"
            )
        by_episode.update(rows_here)
    episodes = [_episode_from_rows(rows) for _, rows in sorted(by_episode.items())]
    for episode in episodes:
        if episode.exclusion is not None:
            continue
        if episode.input_ids.numel() > max_episode_tokens:
            episode.exclusion = "too_long"
        elif episode.response_tokens == 0:
            episode.exclusion = "empty"
    return episodes


def exclusion_counts(episodes: list[TrainEpisode]) -> Counter[str]:
    """How many episodes were excluded, by reason."""
    return Counter(e.exclusion for e in episodes if e.exclusion is not None)
