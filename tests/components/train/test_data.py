"""The trajectories artifact -> episodes: token streams, chunk ids, μ alignment, exclusions."""

from __future__ import annotations

import math

import pytest
import torch

from components.train.data import exclusion_counts, load_episodes
from termrl.artifacts.trajectories import write_trajectories
from termrl.errors import ArtifactError

from .conftest import episode_rows


def rows(episode_id, chunks, reward=1.0, group="g", **flags):
    logprobs = [[-0.5] * len(r) for _, r in chunks]
    return episode_rows(
        episode_id=episode_id,
        group_id=group,
        chunks=chunks,
        logprobs=logprobs,
        reward=reward,
        **flags,
    )


def test_token_stream_and_chunk_ids(tmp_path):
    # chunk rows written out of order: the loader sorts by chunk_index
    data = rows("e", [([10, 11], [20, 21, 22]), ([12], [23])])
    write_trajectories(tmp_path / "t.parquet", list(reversed(data)))
    [episode] = load_episodes(tmp_path / "t.parquet", max_episode_tokens=100)
    assert episode.input_ids.tolist() == [10, 11, 20, 21, 22, 12, 23]
    assert episode.token_chunk.tolist() == [-1, -1, 0, 0, 0, -1, 1]
    mu = episode.mu_logprobs.tolist()
    assert [math.isnan(x) for x in mu] == [True, True, False, False, False, True, False]
    assert episode.chunk_tokens.tolist() == [3, 1]
    assert episode.response_tokens == 4 and episode.exclusion is None


def test_exclusions_by_reason(tmp_path):
    chunk = [([1, 2], [3, 4, 5])]
    data = (
        rows("a", chunk)
        + rows("ph", chunk, placeholder=True, masked=True)
        + rows("dr", chunk, drop=True)
        + rows("mt", chunk, reward=0.0, masked=True, mask_reason="max-turns")
        + rows("mk", chunk, masked=True)
        + rows("un", chunk, trainable=False)
        + rows(
            "lf", [([1], list(range(3, 13)))], reward=0.0, masked=True, mask_reason="long_failure"
        )
        + rows("ls", [([1], list(range(3, 13)))], reward=1.0)  # long and passed: rollout kept it
        + rows("tl", [([1] * 30, [3])])  # 31 tokens > 20
    )
    write_trajectories(tmp_path / "t.parquet", data)
    episodes = load_episodes(tmp_path / "t.parquet", max_episode_tokens=20)
    by_id = {e.episode_id: e.exclusion for e in episodes}
    assert by_id == {
        "a": None,
        "ph": "placeholder",
        "dr": "drop",
        "mt": "max-turns",
        "mk": "masked",
        "un": "untrainable",
        "lf": "long_failure",
        "ls": None,
        "tl": "too_long",
    }
    assert exclusion_counts(episodes)["placeholder"] == 1
    # rollout's over-long and out-of-turns failures keep a real outcome for group statistics;
    # its other masks do not
    valid = {e.episode_id for e in episodes if e.rollout_valid}
    assert valid == {"a", "mt", "lf", "ls", "tl"}


def test_placeholder_rows_with_empty_tokens(tmp_path):
    data = rows("ph", [([], [])], reward=0.0, placeholder=True, masked=True)
    write_trajectories(tmp_path / "t.parquet", data)
    [episode] = load_episodes(tmp_path / "t.parquet", max_episode_tokens=20)
    assert episode.exclusion == "placeholder" and episode.input_ids.numel() == 0


def test_logprob_length_mismatch_is_an_artifact_error(tmp_path):
    data = rows("e", [([1], [2, 3])])
    data[0]["response_logprobs"] = [-0.1]
    write_trajectories(tmp_path / "t.parquet", data)
    with pytest.raises(ArtifactError, match="1 response_logprobs for 2 response_ids"):
        load_episodes(tmp_path / "t.parquet", max_episode_tokens=20)


def test_missing_logprobs_mean_unknown_mu(tmp_path):
    data = rows("e", [([1], [2, 3])])
    data[0]["response_logprobs"] = []
    write_trajectories(tmp_path / "t.parquet", data)
    [episode] = load_episodes(tmp_path / "t.parquet", max_episode_tokens=20)
    assert torch.isnan(episode.mu_logprobs).all()


def write_older(path, data, version, lacking):
    """``data`` written as an older writer did: under ``version``, without the ``lacking`` columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from termrl.artifacts.contract import ArtifactSchema, artifact_info, write_artifact
    from termrl.artifacts.trajectories import TRAJECTORIES

    old_schema = pa.schema([f for f in TRAJECTORIES.schema if f.name not in lacking])
    for row in data:
        for name in lacking:
            del row[name]
    write_artifact(path, data, ArtifactSchema("trajectories", version, old_schema))
    assert artifact_info(path) == ("trajectories", version)
    assert not set(lacking) & set(pq.read_schema(path).names)


def test_old_trajectories_without_the_1_1_columns_still_load(tmp_path):
    # a file written under schema 1.0: no source, replayed, anchor (or shaping) columns at all
    from termrl.artifacts.trajectories import ADDED_IN_1_1, ADDED_IN_1_2

    data = rows("e", [([10, 11], [20, 21]), ([12], [23])])
    write_older(tmp_path / "old.parquet", data, "1.0", ADDED_IN_1_1 + ADDED_IN_1_2)
    [episode] = load_episodes(tmp_path / "old.parquet", max_episode_tokens=100)
    assert episode.source == "policy" and episode.anchor == 1 and episode.shaping == 0.0
    assert episode.chunk_replayed.tolist() == [False, False]
    assert not any(math.isnan(x) for x in episode.mu_logprobs[episode.token_chunk >= 0].tolist())


def test_replayed_chunks_have_no_mu(tmp_path):
    chunks = [([1], [2, 3]), ([4], [5]), ([6], [7, 8])]
    data = (
        # anchor 3: chunks 1 and 2 were replayed; the flag on the second is missing, the anchor implies it
        rows("anchored", chunks, anchor=3, replayed=[True, None, None])
        + rows("flagged", chunks, replayed=[True, False, False])
        + rows("expert", chunks, source="expert")
    )
    write_trajectories(tmp_path / "t.parquet", data)
    by_id = {e.episode_id: e for e in load_episodes(tmp_path / "t.parquet", max_episode_tokens=100)}
    assert by_id["anchored"].anchor == 3
    assert by_id["anchored"].chunk_replayed.tolist() == [True, True, False]
    assert by_id["flagged"].chunk_replayed.tolist() == [True, False, False]
    assert by_id["expert"].is_expert and by_id["expert"].chunk_replayed.tolist() == [
        True,
        True,
        True,
    ]
    # μ is NaN on replayed response tokens (no inference policy produced them), known elsewhere
    anchored = by_id["anchored"]
    trained = anchored.token_chunk >= 0
    unknown = torch.isnan(anchored.mu_logprobs[trained]).tolist()
    replayed_token = anchored.chunk_replayed[anchored.token_chunk[trained]].tolist()
    assert unknown == replayed_token
    assert torch.isnan(by_id["expert"].mu_logprobs).all()


def test_unknown_source_is_an_artifact_error(tmp_path):
    write_trajectories(tmp_path / "t.parquet", rows("e", [([1], [2])], source="teacher"))
    with pytest.raises(ArtifactError, match="source 'teacher'"):
        load_episodes(tmp_path / "t.parquet", max_episode_tokens=20)


def test_demonstrations_artifact_joins_the_trajectories(tmp_path):
    write_trajectories(tmp_path / "t.parquet", rows("p", [([1], [2])]))
    write_trajectories(tmp_path / "d.parquet", rows("x", [([1], [3])], source="expert"))
    episodes = load_episodes(
        tmp_path / "t.parquet", max_episode_tokens=20, demonstrations=tmp_path / "d.parquet"
    )
    assert [(e.episode_id, e.source) for e in episodes] == [("p", "policy"), ("x", "expert")]
    write_trajectories(tmp_path / "dup.parquet", rows("p", [([1], [3])], source="expert"))
    with pytest.raises(ArtifactError, match="episode id 'p'"):
        load_episodes(
            tmp_path / "t.parquet", max_episode_tokens=20, demonstrations=tmp_path / "dup.parquet"
        )


def test_trajectories_without_the_shaping_column_load_with_no_shaping(tmp_path):
    # a 1.1 file: everything but shaping
    from termrl.artifacts.trajectories import ADDED_IN_1_2

    write_older(
        tmp_path / "old.parquet", rows("e", [([1], [2, 3])], reward=0.5), "1.1", ADDED_IN_1_2
    )
    [episode] = load_episodes(tmp_path / "old.parquet", max_episode_tokens=20)
    assert (episode.reward, episode.shaping, episode.shaped_reward) == (0.5, 0.0, 0.5)


def test_shaping_is_read_for_policy_episodes_only(tmp_path):
    data = (
        rows("looped", [([1], [2])], shaping=-0.1)
        + rows("clean", [([1], [2])], shaping=0.0)
        + rows("unset", [([1], [2])])  # null: a writer without penalties
        + rows("x", [([1], [3])], source="expert", shaping=-0.5)
    )  # a demonstration is never shaped
    write_trajectories(tmp_path / "t.parquet", data)
    episodes = load_episodes(tmp_path / "t.parquet", max_episode_tokens=20)
    assert {e.episode_id: (e.reward, e.shaping) for e in episodes} == {
        "looped": (1.0, -0.1),
        "clean": (1.0, 0.0),
        "unset": (1.0, 0.0),
        "x": (1.0, 0.0),
    }
    assert next(e for e in episodes if e.episode_id == "looped").shaped_reward == pytest.approx(0.9)
