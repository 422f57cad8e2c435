"""Multi-step tasks: each step as a task of its own, the min_reward gate, the task's reward strategy."""

from __future__ import annotations

from termrl.artifacts.tasks import Task, TaskFile
from termrl.multistep import below_min_reward, combine, task_steps
from termrl.taskfolders import read_task_folder
from termrl.taskfolders.export import export_tasks
from termrl.taskrun import TestOutcome

from .taskfolders.test_harbor14_run import FIXTURES


def _task(strategy: str | None = None) -> Task:
    return Task(
        id="t",
        instruction="first",
        test_files=[TaskFile("test.sh", b"task"), TaskFile("lib.sh", b"helper")],
        agent_timeout_sec=100.0,
        verifier_timeout_sec=50.0,
        verifier_env={"A": "1"},
        steps=[
            {"name": "one", "min_reward": 1.0, "agent_timeout_sec": 10.0},
            {
                "name": "two",
                "min_reward": {"reward": 0.5},
                "verifier_env": {"B": "2"},
                "verifier_user": "root",
            },
        ],
        step_files=[
            TaskFile("one/instruction.md", b"Do one."),
            TaskFile("one/solution/solve.sh", b"s1", 0o755),
            TaskFile("two/instruction.md", b"Do two."),
            TaskFile("two/tests/test.sh", b"step"),
        ],
        reward_strategy=strategy,
    )


def _outcome(reward: float) -> TestOutcome:
    return TestOutcome(reward >= 1.0, reward, "out\n", 1.0, False, 0)


def test_each_step_runs_as_a_task_with_its_files_over_the_tasks():
    one, two = task_steps(_task())
    assert (one.instruction, two.instruction) == ("Do one.", "Do two.")
    assert (
        one.solution_files == [TaskFile("solve.sh", b"s1", 0o755)]
        and one.solution_command == "bash /solution/solve.sh"
    )
    assert two.solution_files == [] and two.solution_command is None
    assert {f.path: f.data for f in one.test_files} == {"test.sh": b"task", "lib.sh": b"helper"}
    assert {f.path: f.data for f in two.test_files} == {
        "test.sh": b"step",
        "lib.sh": b"helper",
    }  # the step's wins
    assert (one.agent_timeout_sec, two.agent_timeout_sec, two.verifier_timeout_sec) == (
        10.0,
        100.0,
        50.0,
    )
    assert (two.verifier_env, two.verifier_user, one.verifier_user) == (
        {"A": "1", "B": "2"},
        "root",
        None,
    )
    assert not one.steps and not one.step_files
    assert task_steps(Task(id="single", instruction="x")) == [Task(id="single", instruction="x")]


def test_min_reward_gates_a_number_or_the_reward_key():
    task = _task()
    assert below_min_reward(task, 0, _outcome(0.9)) and not below_min_reward(task, 0, _outcome(1.0))
    assert below_min_reward(task, 1, _outcome(0.4)) and not below_min_reward(task, 1, _outcome(0.5))


def test_the_reward_is_the_steps_mean_or_the_final_one():
    # mean of 1.0 and 0.5 = 0.75: not a pass; final: 0.5
    assert combine(_task(), [_outcome(1.0), _outcome(0.5)]).reward == 0.75
    assert combine(_task("final"), [_outcome(1.0), _outcome(0.5)]).reward == 0.5
    both = combine(_task(), [_outcome(1.0), _outcome(1.0)])
    assert both.passed and both.output.count("=== step ") == 2
    # Stopped after the first step: scored steps only (Harbor's mean), and a stopped task never passes.
    stopped = combine(_task("final"), [_outcome(1.0)])
    assert stopped.reward == 1.0 and not stopped.passed


def test_the_fixtures_round_trip_through_export(tmp_path):
    for name in ("multi-step", "separate-verifier", "agent-user"):
        task = read_task_folder(FIXTURES / name)
        [exported] = export_tasks([task], tmp_path)
        assert read_task_folder(exported).to_row() == task.to_row(), name
