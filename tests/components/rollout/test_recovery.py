"""Recovery demonstrations: which failed episodes are replayed, and what train gets from them.

The choice is tested on plain episode records; the replay runs end to end in real podman
sandboxes, through the rollout stage, and its rows are read back by train's own loader.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from components.demonstrate.config import DemonstrateConfig
from components.demonstrate.stage import demonstrate
from components.rollout.config import RolloutConfig
from components.rollout.episode import EpisodeIds, RolloutEpisode
from components.rollout.recovery import Recovery, plan_recoveries, run_recoveries
from components.rollout.stage import rollout
from components.train.data import load_episodes
from termrl.agent.loop import AgentConfig
from termrl.artifacts import read_rollout_metrics, read_trajectories, save_tasks
from termrl.errors import ConfigError
from termrl.sandbox.manager import SandboxManager
from termrl.taskrun import TaskSandboxes
from tests.agent.scripted import ScriptedEngine
from tests.components.rollout.policy import DONE, bash_call, word_task

EXPERT = {"t": [bash_call("mkdir -p /app"), bash_call("echo ant > /app/out.txt")]}


def _chunk(text: str, exit_code: int | None, *, replayed: bool = False) -> dict:
    name = "done" if text == DONE else "bash"
    return {
        "response_text": text,
        "action": json.dumps([{"name": name, "arguments": {}}]),
        "exit_code": exit_code,
        "replayed": replayed,
    }


def _episode(episode_id: str, chunks: list[dict], *, anchor: int = 1, **fields) -> RolloutEpisode:
    record = RolloutEpisode(
        ids=EpisodeIds(episode_id, "g", 0, 0, anchor=anchor),
        task_id=fields.pop("task_id", "t"),
        policy_version=1,
        mode="roll-managed",
        chunks=chunks,
        rewarded=True,
    )
    return dataclasses.replace(record, **fields)


def test_a_failed_episode_whose_first_sampled_command_errored_is_replayed_from_there():
    mistake = bash_call("cat /app/missing")
    episodes = [_episode("e1", [_chunk(mistake, 1), _chunk(DONE, None)])]
    [recovery] = plan_recoveries(episodes, EXPERT, per_task=2)
    assert recovery.episode_id == "e1" and recovery.context_turns == 1
    assert recovery.responses == (mistake, *EXPERT["t"], DONE)

    # Anchored at 2: the expert's first command was replayed, the policy erred on the second.
    anchored = [
        _episode("e2", [_chunk(EXPERT["t"][0], 0, replayed=True), _chunk(mistake, 2)], anchor=2)
    ]
    [recovery] = plan_recoveries(anchored, EXPERT, per_task=2)
    assert recovery.context_turns == 2
    assert recovery.responses == (EXPERT["t"][0], mistake, EXPERT["t"][1], DONE)


@pytest.mark.parametrize(
    "why, episode",
    [
        ("it passed", _episode("e", [_chunk("x", 1)], success=True)),
        ("its command succeeded", _episode("e", [_chunk("x", 0), _chunk("y", 1)])),
        ("it called done at once", _episode("e", [_chunk(DONE, None)])),
        ("its tests never ran", _episode("e", [_chunk("x", 1)], rewarded=False)),
        ("it failed in the harness", _episode("e", [_chunk("x", 1)], failure_type="ExecTimeout")),
        ("it tampered", _episode("e", [_chunk("x", 1)], tampering=("/usr/bin/python3",))),
        ("it broke its sandbox", _episode("e", [_chunk("x", 1)], sandbox_broken=True)),
        ("its task has no demonstration", _episode("e", [_chunk("x", 1)], task_id="other")),
        ("it is anchored after the last command", _episode("e", [_chunk("x", 1)], anchor=3)),
    ],
)
def test_no_recovery_when(why, episode):
    assert plan_recoveries([episode], EXPERT, per_task=2) == [], why


def test_per_task_distinct_mistakes_up_to_the_cap_in_episode_order():
    episodes = [
        _episode(f"e{i}", [_chunk(text, 1)])
        for i, text in [(3, "c"), (1, "a"), (2, "a"), (4, "b"), (0, "d")]
    ]
    planned = plan_recoveries(episodes, EXPERT, per_task=2)
    assert [(r.episode_id, r.responses[0]) for r in planned] == [("e0", "d"), ("e1", "a")]
    assert len(plan_recoveries(episodes, EXPERT, per_task=4)) == 4  # "a" once: 4 distinct


def test_recoveries_need_demonstrations_and_the_roll_managed_agent(tmp_path):
    save_tasks(tmp_path / "tasks.parquet", [word_task("t", "ant")])
    config = RolloutConfig(tasks=tmp_path / "tasks.parquet", recoveries_per_task=1)
    with pytest.raises(ConfigError, match="recoveries_per_task needs a demonstrations"):
        config.validate()
    config.demonstrations, config.mode = tmp_path / "tasks.parquet", "cli-native"
    with pytest.raises(ConfigError, match="roll-managed"):
        config.validate()
    config.recoveries_per_task = -1
    with pytest.raises(ConfigError, match="recoveries_per_task must not be negative"):
        config.validate()


@pytest.mark.podman
@pytest.mark.ci
async def test_a_rollouts_failed_episodes_become_recoveries_train_imitates(
    base_image, tiny_tokenizer, tmp_path
):
    # Two tasks with the same solution. On "ant" the policy's first command fails and leaves
    # the state as it was: the expert's command after it passes. On "bee" it fails after
    # putting a directory where the answer goes: the expert's command cannot recover that.
    tasks = [
        dataclasses.replace(word_task(f"rc-{w}", w), solution_command=f"echo {w} > /app/out.txt")
        for w in ("ant", "bee")
    ]
    save_tasks(tmp_path / "tasks.parquet", tasks)
    demos = tmp_path / "demos.parquet"
    await demonstrate(
        DemonstrateConfig(tasks=tmp_path / "tasks.parquet", out=demos, progress=False),
        tasks,
        tiny_tokenizer,
    )
    mistakes = {
        "rc-ant": bash_call("cat /app/answer.txt"),
        "rc-bee": bash_call("mkdir /app/out.txt && false"),
    }

    class Policy(ScriptedEngine):
        async def generate(self, prompts, params):
            text = self.tokenizer.decode(prompts[0])
            task = "rc-ant" if "word ant" in text else "rc-bee"
            self.responses = [DONE if "<tool_response>" in text else mistakes[task]]
            return await super().generate(prompts, params)

    config = RolloutConfig(
        tasks=tmp_path / "tasks.parquet",
        out=tmp_path / "traj.parquet",
        group_size=2,
        groups=2,
        redundancy=0,
        concurrency=2,
        max_turns=2,
        demonstrations=demos,
        recoveries_per_task=2,
    )
    summary = await rollout(config, tasks, Policy(tiny_tokenizer, []))

    rows = read_trajectories(config.out).to_pylist()
    assert summary.rows == len(rows)
    policy_rows = [r for r in rows if r["source"] == "policy"]
    assert len({r["episode_id"] for r in policy_rows}) == 4 and not any(
        r["success"] for r in policy_rows
    )
    recovered = sorted((r for r in rows if r["mode"] == "recovery"), key=lambda r: r["chunk_index"])
    # The same mistake in both of rc-ant's episodes: one recovery; rc-bee's did not pass.
    assert {r["task_id"] for r in recovered} == {"rc-ant"}
    assert len({r["episode_id"] for r in recovered}) == 1
    assert [r["response_text"] for r in recovered] == [bash_call("echo ant > /app/out.txt"), DONE]
    assert all(r["source"] == "expert" and r["replayed"] and r["success"] for r in recovered)
    assert all(r["temperature"] is None for r in recovered)
    assert {r["temperature"] for r in policy_rows} == {config.temperature}
    # The mistake and its error lead the prompt: the model sees them, train never imitates them.
    prompt = tiny_tokenizer.decode(recovered[0]["prompt_ids"])
    assert "cat /app/answer.txt" in prompt and "No such file or directory" in prompt
    assert "[exit code: 1]" in prompt and prompt.count("<tool_call>") >= 2
    assert (
        summary.lines[-1]
        == "recoveries: 1 of 2 kept (dropped: 1 the expert's steps did not recover)"
    )
    metrics = {
        (r["scope"], r["key"], r["metric"]): r["value"]
        for r in read_rollout_metrics(config.metrics_path).to_pylist()
    }
    assert metrics[("global", "all", "rollout/recoveries")] == 1
    assert metrics[("global", "all", "rollout/recoveries_dropped")] == 1

    [episode] = [
        e
        for e in load_episodes(config.out, max_episode_tokens=8192)
        if e.episode_id.startswith("recovery-")
    ]
    assert episode.is_expert and episode.exclusion is None
    trained = episode.input_ids[episode.token_chunk >= 0].tolist()
    expected = [t for r in recovered for t in r["response_ids"]]
    assert trained == expected  # only the expert's turns


@pytest.mark.podman
async def test_a_recovery_that_fails_unexpectedly_is_dropped_and_the_rollout_goes_on(base_image):
    class Broken:  # a tokenizer that fails the replay half-way, inside its sandbox
        def __getattr__(self, name):
            raise RuntimeError("boom")

    task = word_task("rc-crash", "ant")
    recovery = Recovery("e1", task.id, (bash_call("false"), DONE), 1)
    async with SandboxManager(max_sessions=1) as manager:
        batch = await run_recoveries(
            [recovery],
            {task.id: task},
            TaskSandboxes(manager),
            Broken(),
            AgentConfig(),
            policy_version=1,
        )
    assert (batch.rows, batch.kept) == ([], 0)
    assert batch.dropped == Counter({"unexpected error (RuntimeError)": 1})
