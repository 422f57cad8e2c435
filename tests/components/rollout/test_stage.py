"""End-to-end rollouts in real podman sandboxes.

Fault injection uses real mechanisms, each in 1 task of 10 (10 % of episodes):
an image build that fails, a command that hangs past its timeout, ``podman
kill`` of a container mid-episode, and a test script that crashes after
writing garbage to the reward file. The policy is scripted (fast and
deterministic); the tiny-model tests run the real engine in both modes.

A multi-step task (the Harbor 1.4 fixture) rolls out as one episode and one
conversation: a scripted policy solves or fails its steps to check the
reward strategies and the min_reward stop, the tiny model runs it for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections import defaultdict

import pytest

from components.rollout.config import RolloutConfig
from components.rollout.stage import make_engine, rollout
from termrl.artifacts import Task, read_rollout_metrics, read_trajectories, save_tasks
from termrl.llm.batching import BatchingEngine
from termrl.llm.continuous import ContinuousEngine
from termrl.llm.hf_engine import TransformersEngine
from termrl.taskfolders import read_task_folder
from tests.components.rollout.policy import (
    DONE,
    ScriptedPolicy,
    StepsPolicy,
    bash_call,
    broken_build_task,
    garbage_reward_task,
    word_task,
)
from tests.taskfolders.test_harbor14_run import FIXTURES

pytestmark = [pytest.mark.podman, pytest.mark.slow]

KNOWN_FAILURES = {
    "EnvInitFailed",
    "SandboxUnavailable",
    "ResetFailed",
    "RewardFailed",
    "ExecTimeout",
    "SandboxDied",
    "NetworkError",
}


async def _podman(*args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "podman", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await process.communicate()
    return out.decode() if process.returncode == 0 else ""


async def _kill_when_agent_started(task_id: str, killed: list[str]) -> None:
    """Kill (podman kill) every container of ``task_id`` once the agent's command runs in it."""
    while True:
        for name in (await _podman("ps", "-q", "--filter", f"label=termrl.task={task_id}")).split():
            if name not in killed and await _podman("exec", name, "ls", "/tmp/agent-started"):
                await _podman("kill", name)
                killed.append(name)
        await asyncio.sleep(0.3)


def _episodes(path) -> dict[str, list[dict]]:
    episodes: dict[str, list[dict]] = defaultdict(list)
    for row in read_trajectories(path).to_pylist():
        episodes[row["episode_id"]].append(row)
    return episodes


async def test_fault_injection_rollout_completes_and_classifies_every_failure(
    base_image, tiny_tokenizer, tmp_path
):
    tasks = [word_task(f"fi-ok{i}", w) for i, w in enumerate(["ant", "bee", "cat", "dog", "eel"])]
    tasks += [
        word_task(
            "fi-peek",
            "fox",
            marker="[peek]",
            dockerfile=(
                "FROM termrl/base:bookworm\nWORKDIR /app\nRUN mkdir -p /tests /solution /logs/verifier"
                " && echo leak > /tests/answer && echo 1 > /logs/verifier/reward.txt\n"
            ),
        ),
        broken_build_task("fi-broken"),
        word_task("fi-hang", "gnu", marker="[hang]"),
        word_task("fi-die", "hen", marker="[die]"),
        garbage_reward_task("fi-garbage"),
    ]
    out = tmp_path / "trajectories.parquet"
    config = RolloutConfig(
        tasks=out,
        out=out,
        group_size=2,
        groups=10,
        redundancy=0,
        concurrency=4,
        max_turns=4,
        exec_timeout_sec=30.0,
    )
    killed: list[str] = []
    watcher = asyncio.create_task(_kill_when_agent_started("fi-die", killed))
    try:
        summary = await rollout(config, tasks, ScriptedPolicy(tiny_tokenizer))
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert len(killed) == 2

    episodes = _episodes(out)
    # Batch shape: 10 groups × 2 episodes, each episode at least one row.
    assert len(episodes) == 20 and summary.episodes == 20
    groups: dict[str, set[str]] = defaultdict(set)
    for episode_id, rows in episodes.items():
        groups[rows[0]["group_id"]].add(episode_id)
        assert [r["chunk_index"] for r in rows] == list(range(len(rows)))
    assert len(groups) == 10 and all(len(g) == 2 for g in groups.values())

    by_task: dict[str, list[dict]] = defaultdict(list)
    for rows in episodes.values():
        assert rows[0]["failure_type"] in KNOWN_FAILURES | {None}
        by_task[rows[0]["task_id"]].append(rows[0])
    for task_id in ("fi-broken", "fi-garbage"):  # unrecoverable → placeholder
        expected = "EnvInitFailed" if task_id == "fi-broken" else "RewardFailed"
        for first in by_task[task_id]:
            assert (first["failure_type"], first["placeholder"], first["masked"]) == (
                expected,
                True,
                True,
            )
            assert first["response_ids"] == [] and not first["drop"]
    for first in by_task["fi-die"]:  # transient → masked, group dropped
        assert (first["failure_type"], first["drop"], first["masked"]) == (
            "SandboxDied",
            True,
            True,
        )
    for first in by_task["fi-hang"]:  # the tool call timed out → drop flag, group dropped
        assert first["failure_type"] is None and first["drop"] and first["success"] is False
        assert "timed out" in first["observation"]
    for task_id in [t.id for t in tasks[:6]]:
        for first in by_task[task_id]:
            assert (first["success"], first["masked"], first["drop"]) == (True, False, False)
            assert first["trainable"] and first["reward"] == 1.0
    # Set-up leftovers were removed before the agent started.
    peek = episodes[by_task["fi-peek"][0]["episode_id"]][0]["observation"]
    assert "cannot access '/tests'" in peek and "cannot access '/solution'" in peek
    assert sorted(summary.dropped_groups) == sorted(
        {r["group_id"] for t in ("fi-hang", "fi-die") for r in by_task[t]}
    )

    metrics = {
        (r["scope"], r["key"], r["metric"]): r["value"]
        for r in read_rollout_metrics(config.metrics_path).to_pylist()
    }
    for failure in ("EnvInitFailed", "RewardFailed", "SandboxDied"):
        assert metrics[("global", "all", f"rollout/failure/{failure}")] == 2
    assert metrics[("global", "all", "rollout/exec_timeouts")] == 2
    assert metrics[("task", "fi-peek", "test_access_episodes")] == 2
    assert ("alert", "failure_rate", "value") in metrics
    assert not config.parts_dir.exists()


@pytest.mark.ci
async def test_an_episode_that_broke_its_sandbox_for_scoring_is_rewarded_0_not_masked(
    base_image, tiny_tokenizer, tmp_path
):
    """Masked, breaking the sandbox would be a policy's way out of a failing score."""
    tasks = [word_task("bk-ok", "ant"), word_task("bk-break", "bee", marker="[break]")]
    out = tmp_path / "trajectories.parquet"
    config = RolloutConfig(
        tasks=out, out=out, group_size=2, groups=2, redundancy=0, concurrency=4, max_turns=2
    )
    await rollout(config, tasks, ScriptedPolicy(tiny_tokenizer))
    firsts = {rows[0]["episode_id"]: rows[0] for rows in _episodes(out).values()}
    by_task = defaultdict(list)
    for first in firsts.values():
        by_task[first["task_id"]].append(first)
    for first in by_task["bk-break"]:
        assert first["failure_type"] is None and not (first["masked"] or first["placeholder"])
        assert (first["reward"], first["success"]) == (0.0, False)
    assert [first["reward"] for first in by_task["bk-ok"]] == [1.0, 1.0]
    metrics = {
        (r["scope"], r["key"], r["metric"]): r["value"]
        for r in read_rollout_metrics(config.metrics_path).to_pylist()
    }
    assert metrics[("global", "all", "rollout/sandbox_broken_episodes")] == 2
    assert metrics[("task", "bk-ok", "sandbox_broken_episodes")] == 0


def _check_token_columns(episodes: dict[str, list[dict]]) -> None:
    for rows in episodes.values():
        for row in rows:
            if not row["placeholder"]:
                assert len(row["response_logprobs"]) == len(row["response_ids"]) > 0
        assert rows[0]["prompt_ids"]  # the first chunk carries the whole prompt


@pytest.mark.ci
async def test_tiny_model_roll_managed_rollout(base_image, tiny_model_dir, tmp_path):
    tasks = [word_task("tm-a", "ant"), word_task("tm-b", "bee")]
    out = tmp_path / "trajectories.parquet"
    config = RolloutConfig(
        tasks=out,
        out=out,
        group_size=2,
        groups=2,
        redundancy=1,
        concurrency=4,
        max_turns=2,
        max_new_tokens=24,
        exec_timeout_sec=10.0,
        policy_version=3,
    )
    engine = BatchingEngine(
        TransformersEngine(tiny_model_dir, context_window=2048), max_batch_size=8
    )
    summary = await rollout(config, tasks, engine)
    episodes = _episodes(out)
    assert len(episodes) == 4 == summary.episodes
    assert len({rows[0]["group_id"] for rows in episodes.values()}) == 2
    _check_token_columns(episodes)
    first = next(iter(episodes.values()))[0]
    assert (first["mode"], first["policy_version"]) == ("roll-managed", 3)
    # Every generate call went through the batching front (a cancelled straggler's too).
    assert sum(engine.batch_sizes) >= sum(len(rows) for rows in episodes.values())


@pytest.mark.ci
async def test_the_stage_engine_continuous_batching_rollout(base_image, tiny_model_dir, tmp_path):
    tasks = [word_task("cb-a", "ant"), word_task("cb-b", "bee")]
    out = tmp_path / "trajectories.parquet"
    config = RolloutConfig(
        tasks=out,
        out=out,
        model=str(tiny_model_dir),
        group_size=2,
        groups=2,
        redundancy=0,
        concurrency=4,
        max_turns=3,
        max_new_tokens=24,
        context_window=2048,
        exec_timeout_sec=10.0,
    )
    engine = make_engine(config)  # the default: continuous batching with KV reuse
    assert isinstance(engine, ContinuousEngine)
    summary = await rollout(config, tasks, engine)
    episodes = _episodes(out)
    assert len(episodes) == 4 == summary.episodes
    _check_token_columns(episodes)
    # The four episodes shared the running batch, and later turns (and the shared system
    # prompt) came from the prefix cache.
    assert max(engine.step_sizes) > 1
    assert engine.prefix_cache.hits > 0


def test_the_batching_engine_is_a_config_away(tiny_model_dir, tmp_path):
    config = RolloutConfig(model=str(tiny_model_dir), engine="batching")
    engine = make_engine(config)
    assert isinstance(engine, BatchingEngine) and engine.merges_requests
    assert isinstance(engine.engine, TransformersEngine)


async def test_cli_native_rollout_runs_the_reference_cli_against_the_proxy(
    base_image, tiny_model_dir, tiny_tokenizer, tmp_path
):
    tasks = [word_task("cn-a", "ant")]
    save_tasks(tmp_path / "tasks.parquet", tasks)

    def config(name: str) -> RolloutConfig:
        out = tmp_path / name / "trajectories.parquet"
        return RolloutConfig(
            tasks=tmp_path / "tasks.parquet",
            out=out,
            group_size=2,
            groups=1,
            redundancy=0,
            concurrency=2,
            max_turns=3,
            max_new_tokens=48,
            mode="cli-native",
        )

    # Scripted policy: the CLI's `bash -c` really runs in the sandbox (the reward proves it).
    scripted = config("scripted")
    await rollout(scripted, tasks, ScriptedPolicy(tiny_tokenizer))
    for rows in _episodes(scripted.out).values():
        assert [r["chunk_index"] for r in rows] == [0, 1]
        assert (rows[0]["success"], rows[0]["reward"], rows[0]["stop_reason"]) == (
            True,
            1.0,
            "done",
        )
        assert rows[0]["exit_code"] == 0 and rows[0]["exec_ms"] > 0
        assert json.loads(rows[0]["action"])[0]["arguments"]["command"] == "echo ant > /app/out.txt"
        assert rows[0]["trainable"] and rows[0]["mode"] == "cli-native"
        # The second chunk's prompt delta is the observation turn the CLI sent back.
        assert "exit code: 0" in rows[0]["observation"] and rows[1]["prompt_ids"]
    metrics = {
        (r["scope"], r["key"], r["metric"]): r["value"]
        for r in read_rollout_metrics(scripted.metrics_path).to_pylist()
    }
    assert metrics[("tool", "bash", "success")] == 2  # seen through the exec bridge

    # The tiny model: real sampling, token ids and logprobs recorded by the proxy.
    tiny = config("tiny")
    summary = await rollout(tiny, tasks, TransformersEngine(tiny_model_dir, context_window=2048))
    episodes = _episodes(tiny.out)
    assert len(episodes) == 2 == summary.episodes
    _check_token_columns(episodes)
    for rows in episodes.values():
        assert rows[0]["failure_type"] is None and rows[0]["stop_reason"] in ("done", "max-turns")


CREATE, APPEND = "Create /app/notes.txt", "Append the line"
"""Pieces of the fixture's two step instructions (``create``: min_reward 1; ``extend``)."""


def _multi_step(task_id: str, marker: str, **changes) -> Task:
    """The multi-step fixture with ``(marker)`` before each step's instruction."""
    task = read_task_folder(FIXTURES / "multi-step")
    files = [
        dataclasses.replace(f, data=f"({marker}) ".encode() + f.data)
        if f.path.endswith("instruction.md")
        else f
        for f in task.step_files
    ]
    return dataclasses.replace(task, id=task_id, step_files=files, **changes)


def _metrics(config: RolloutConfig) -> dict[tuple[str, str, str], float]:
    return {
        (r["scope"], r["key"], r["metric"]): r["value"]
        for r in read_rollout_metrics(config.metrics_path).to_pylist()
    }


def _assert_one_stream(rows: list[dict], fed: list[list[int]]) -> None:
    """Each chunk's prompt extends the stream of the chunks before it: what the model was fed."""
    stream: list[int] = []
    seen = {tuple(f) for f in fed}
    for row in rows:
        stream += row["prompt_ids"]
        assert tuple(stream) in seen
        stream += row["response_ids"]
    assert rows[0]["episode_tokens"] == len(stream)


async def test_a_multi_step_task_rolls_out_as_one_conversation(
    base_image, tiny_tokenizer, tmp_path
):
    ok1 = [bash_call("echo first > /app/notes.txt") + "\n" + DONE]  # output unseen until step 2
    bad1 = [bash_call("echo nope > /app/notes.txt"), DONE]
    ok2 = [bash_call("echo second >> /app/notes.txt"), DONE]
    bad2 = [bash_call("echo wrong >> /app/notes.txt") + "\n" + DONE]
    policy = StepsPolicy(
        tiny_tokenizer,
        {
            f"(both) {CREATE}": ok1,
            f"(both) {APPEND}": ok2,
            f"(mean) {CREATE}": ok1,
            f"(mean) {APPEND}": bad2,
            f"(final) {CREATE}": ok1,
            f"(final) {APPEND}": bad2,
            f"(stop) {CREATE}": bad1,
            f"(stop) {APPEND}": ok2,
        },
    )
    tasks = [
        _multi_step("ms-both", "both"),
        _multi_step("ms-mean", "mean"),
        _multi_step("ms-final", "final", reward_strategy="final"),
        _multi_step("ms-stop", "stop"),
    ]
    out = tmp_path / "trajectories.parquet"
    config = RolloutConfig(
        tasks=out, out=out, group_size=1, groups=4, redundancy=0, concurrency=4, max_turns=3
    )
    await rollout(config, tasks, policy)
    episodes = {rows[0]["task_id"]: rows for rows in _episodes(out).values()}
    assert sorted(episodes) == ["ms-both", "ms-final", "ms-mean", "ms-stop"]
    for rows in episodes.values():
        assert rows[0]["failure_type"] is None and not rows[0]["placeholder"]
        assert [r["chunk_index"] for r in rows] == list(range(len(rows)))
        assert all(r["trainable"] for r in rows)
        _assert_one_stream(rows, policy.fed)
        for row in rows:  # instructions are fed to the model, never trained on as its response
            assert CREATE not in row["response_text"] and APPEND not in row["response_text"]
    # Every chunk carries the episode's reward: both steps passed (1); step 2 failed: the mean of
    # 1 and 0 is 0.5, the final step's is 0; step 1 missed its min_reward 1: stopped there, 0.
    rewards = {t: {(r["reward"], r["success"]) for r in rows} for t, rows in episodes.items()}
    assert rewards == {
        "ms-both": {(1.0, True)},
        "ms-mean": {(0.5, False)},
        "ms-final": {(0.0, False)},
        "ms-stop": {(0.0, False)},
    }

    # Step 2's instruction opens its first chunk as a user turn, after the output of the command
    # that step 1's done turn ran; the stream stays one conversation.
    both = episodes["ms-both"]
    assert len(both) == 3  # step 1: one turn (command + done); step 2: command, done
    opening = tiny_tokenizer.decode(both[1]["prompt_ids"])
    assert opening.index("[exit code: 0]") < opening.index(APPEND)
    assert opening.count("<|im_start|>user") == 2 and opening.endswith("<|im_start|>assistant\n")
    assert CREATE in tiny_tokenizer.decode(both[0]["prompt_ids"])
    # The stopped episode never saw step 2.
    assert not any(APPEND in tiny_tokenizer.decode(r["prompt_ids"]) for r in episodes["ms-stop"])

    metrics = _metrics(config)
    assert metrics[("task", "ms-both", "step/2/reward_mean")] == 1.0
    assert metrics[("task", "ms-mean", "step/1/reward_mean")] == 1.0
    assert metrics[("task", "ms-mean", "step/2/reward_mean")] == 0.0
    assert metrics[("task", "ms-stop", "step/1/episodes")] == 1
    assert ("task", "ms-stop", "step/2/episodes") not in metrics
    assert ("global", "all", "rollout/failure/RewardFailed") not in metrics


@pytest.mark.ci
async def test_tiny_model_multi_step_rollout(base_image, tiny_model_dir, tiny_tokenizer, tmp_path):
    """The real engine on the fixture, once as it is (step 1 gates) and once without the gate."""
    gated = _multi_step("tm-gated", "gated")
    ungated = _multi_step(
        "tm-ungated", "ungated", steps=[{**s, "min_reward": None} for s in gated.steps]
    )
    out = tmp_path / "trajectories.parquet"
    config = RolloutConfig(
        tasks=out,
        out=out,
        group_size=2,
        groups=2,
        redundancy=0,
        concurrency=4,
        max_turns=2,
        max_new_tokens=24,
        exec_timeout_sec=10.0,
    )
    model = TransformersEngine(tiny_model_dir, context_window=2048)
    fed: list[list[int]] = []
    generate = model.generate

    async def recording(prompts, params):
        fed.extend(list(p) for p in prompts)
        return await generate(prompts, params)

    model.generate = recording  # type: ignore[method-assign]
    summary = await rollout(config, [gated, ungated], BatchingEngine(model, max_batch_size=8))
    episodes = _episodes(out)
    assert len(episodes) == 4 == summary.episodes
    _check_token_columns(episodes)
    for rows in episodes.values():
        # Scored step by step: no RewardFailed, a reward from the tests.
        assert rows[0]["failure_type"] is None and not rows[0]["placeholder"], rows[0]
        assert [r["chunk_index"] for r in rows] == list(range(len(rows)))
        _assert_one_stream(rows, fed)
    metrics = _metrics(config)
    # The tiny model does not write `first`: the gated episodes stop after step 1; the ungated
    # ones go on to step 2, whose instruction reaches the model inside the same stream.
    assert metrics[("task", "tm-gated", "step/1/episodes")] == 2
    assert ("task", "tm-gated", "step/2/episodes") not in metrics
    assert metrics[("task", "tm-ungated", "step/2/episodes")] == 2
    for rows in episodes.values():
        opens = [r["chunk_index"] for r in rows if APPEND in tiny_tokenizer.decode(r["prompt_ids"])]
        assert opens == ([] if rows[0]["task_id"] == "tm-gated" else [opens[0]]) and 0 not in opens
