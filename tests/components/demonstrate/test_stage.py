"""The demonstrate stage on real sandboxes: replays pass, broken solutions are counted, reruns resume.

A multi-step task gets no demonstration (rollout never anchors one): counted, never a crash.
"""

from __future__ import annotations

import dataclasses

import pytest

from components.demonstrate.config import DemonstrateConfig
from components.demonstrate.stage import main, phrasings
from components.rollout.anchors import load_demonstrations
from components.synthesize.generate import make_task, task_seed
from termrl.artifacts.tasks import TaskFile, save_tasks
from termrl.artifacts.trajectories import read_trajectories
from termrl.llm.models import load_tokenizer
from termrl.taskfolders import read_task_folder
from tests.taskfolders.test_harbor14_run import FIXTURES

pytestmark = pytest.mark.podman


def test_demonstrations_replay_to_a_pass_and_resume(tmp_path, base_images, tiny_model_dir):
    good = make_task("files-permissions", "easy", task_seed(3, 0))
    broken = dataclasses.replace(
        make_task("git", "easy", task_seed(3, 1)),
        id="broken",
        solution_files=[TaskFile("solve.sh", b"true\n")],
    )
    no_solution = dataclasses.replace(
        make_task("git", "easy", task_seed(3, 2)),
        id="bare",
        solution_files=[],
        solution_command=None,
    )
    multi_step = read_task_folder(FIXTURES / "multi-step")
    save_tasks(tmp_path / "tasks.parquet", [good, broken, no_solution, multi_step])
    config = DemonstrateConfig(
        tasks=tmp_path / "tasks.parquet",
        out=tmp_path / "demos.parquet",
        model=str(tiny_model_dir),
        every_phrasing=False,  # the phrasings' own test is below
        progress=False,
    )

    summary = main(config)

    assert (summary.tasks, summary.demonstrations, summary.episodes) == (4, 1, 1)
    assert summary.dropped == {
        "replay failed its tests": 1,
        "the task has no solution": 1,
        "multi-step task": 1,
    }
    rows = read_trajectories(config.out).to_pylist()
    assert {r["task_id"] for r in rows} == {good.id}
    assert all(r["source"] == "expert" and r["replayed"] and r["success"] for r in rows)
    assert [r["chunk_index"] for r in rows] == list(range(len(rows)))
    assert rows[-1]["action"] == '[{"name": "done", "arguments": {}}]'
    assert "[exit code: 0]" in rows[0]["observation"]

    parts = sorted(p.name for p in config.parts_dir.iterdir())
    again = main(config)  # every task is done: nothing runs, the same artifact comes out
    assert sorted(p.name for p in config.parts_dir.iterdir()) == parts
    assert again.demonstrations == 1 and read_trajectories(config.out).to_pylist() == rows


def test_every_phrasing_is_replayed_in_its_own_sandbox(tmp_path, base_images, tiny_model_dir):
    task = make_task("checksums", "easy", task_seed(5, 0))
    voices = task.metadata["phrasings"]
    assert (
        len(set(voices.values())) == 3
        and task.instruction == voices[task.metadata["phrasing"]] + "\n"
    )
    save_tasks(tmp_path / "tasks.parquet", [task])
    config = DemonstrateConfig(
        tasks=tmp_path / "tasks.parquet",
        out=tmp_path / "demos.parquet",
        model=str(tiny_model_dir),
        progress=False,
    )

    summary = main(config)

    assert (summary.demonstrations, summary.episodes) == (1, 3)
    rows = read_trajectories(config.out).to_pylist()
    episodes: dict[str, list[dict]] = {}
    for row in rows:
        episodes.setdefault(row["episode_id"], []).append(row)
    assert sorted(episodes) == sorted(
        [f"expert-{task.id}"]
        + [f"expert-{task.id}~{s}" for s in voices if s != task.metadata["phrasing"]]
    )
    assert len({r["group_id"] for r in rows}) == 3
    tokenizer = load_tokenizer(str(tiny_model_dir))
    asked = set()
    for episode in episodes.values():
        assert [r["chunk_index"] for r in episode] == list(range(len(episode)))
        assert all(r["success"] and r["replayed"] and r["task_id"] == task.id for r in episode)
        first_prompt = tokenizer.decode(episode[0]["prompt_ids"])
        asked |= {style for style, text in voices.items() if text in first_prompt}
        # The same work under each phrasing: the responses are the solution's, word for word.
        assert [r["response_text"] for r in episode] == [
            r["response_text"] for r in episodes[f"expert-{task.id}"]
        ]
    assert asked == set(voices)
    # Rollout's anchors read one demonstration per task, whatever the phrasings.
    assert list(load_demonstrations(config.out)) == [task.id]


def test_phrasings_start_with_the_tasks_own_and_skip_repeats():
    task = make_task("checksums", "easy", task_seed(5, 0))
    own = task.metadata["phrasing"]
    got = phrasings(task, every_phrasing=True)
    assert got[0] == ("", task.instruction)
    assert sorted(name for name, _ in got[1:]) == sorted(
        s for s in task.metadata["phrasings"] if s != own
    )
    assert all(text.endswith("\n") and not text.endswith("\n\n") for _, text in got)
    assert phrasings(task, every_phrasing=False) == [("", task.instruction)]
    same = dataclasses.replace(
        task, metadata={**task.metadata, "phrasings": {"a": task.instruction.strip(), "b": " "}}
    )
    assert phrasings(same, every_phrasing=True) == [("", task.instruction)]
    external = dataclasses.replace(task, metadata={})  # an imported Terminal-Bench task
    assert phrasings(external, every_phrasing=True) == [("", task.instruction)]
