"""Eval end to end in real podman sandboxes: the harness checks itself.

The oracle agent must pass every fixture task and the nop agent none; a solve
past its budget fails and is flagged; a broken image gives environment-error
rows, a sandbox the agent broke for scoring a sandbox-broken failure; the
policy agent (the training agent's ``run_episode``) runs the tiny model through
the same harness. On a multi-step task the policy agent carries
one conversation across the steps, as rollout does (a scripted policy checks
the token stream), and a step whose agent failed ends the trial.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from components.eval.agents import PolicyAgent, TrialRun
from components.eval.cli import eval_command
from components.eval.config import EvalConfig
from components.eval.taxonomy import FAILURE_MODES
from components.eval.trials import run_trials, trial_row
from termrl.artifacts.eval_results import read_eval_results
from termrl.artifacts.tasks import TaskFile, save_tasks
from termrl.taskfolders import import_task_folders, read_task_folder
from tests.components.rollout.policy import DONE, StepsPolicy, bash_call
from tests.taskfolders.test_harbor14_run import FIXTURES as HARBOR14

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"
QUICK = ["hello-file", "reverse-words"]  # one Harbor (reward file), one legacy (pytest report)


def fixture_task(task_id: str):
    return next(t for t in import_task_folders([FIXTURES]).tasks if t.id == task_id)


def run_cli(*args: str) -> list[dict]:
    result = CliRunner().invoke(eval_command, [*args, "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = args[args.index("--out") + 1]
    return read_eval_results(out).to_pylist()


def test_a_solve_past_its_budget_fails_whatever_the_tests_say() -> None:
    task = fixture_task("hello-file")
    config = EvalConfig(agent="oracle")
    row = trial_row(
        config,
        task,
        0,
        TrialRun(stop_reason="done"),
        over_budget=True,
        tests_passed=True,
        reward=1.0,
    )
    assert (row["passed"], row["reward"], row["over_budget"], row["tests_passed"]) == (
        False,
        0.0,
        True,
        True,
    )
    assert row["failure_mode"] == "timeout"
    row = trial_row(
        config,
        task,
        0,
        TrialRun(stop_reason="done"),
        over_budget=False,
        tests_passed=True,
        reward=1.0,
    )
    assert (row["passed"], row["failure_mode"]) == (True, None)


def test_a_pass_scored_after_tampering_is_no_pass() -> None:
    task = fixture_task("hello-file")
    run = TrialRun(stop_reason="done")
    row = trial_row(
        EvalConfig(agent="oracle"),
        task,
        0,
        run,
        over_budget=False,
        tests_passed=True,
        reward=1.0,
        tampering=("/usr/local/bin/bash: shadows /usr/bin/bash",),
    )
    assert (row["passed"], row["reward"], row["tests_passed"]) == (False, 0.0, True)
    assert row["failure_mode"] == "verifier-tampering"
    assert row["tampering"] == "/usr/local/bin/bash: shadows /usr/bin/bash"


def _oracle_and_nop(tmp_path: Path, tasks: list[str]) -> tuple[list[dict], list[dict]]:
    picks = [a for t in tasks for a in ("--task", t)]
    oracle = run_cli(
        "--tasks",
        str(FIXTURES),
        "--agent",
        "oracle",
        "--out",
        str(tmp_path / "oracle.parquet"),
        "--report",
        str(tmp_path / "oracle.html"),
        *picks,
    )
    nop = run_cli(
        "--tasks", str(FIXTURES), "--agent", "nop", "--out", str(tmp_path / "nop.parquet"), *picks
    )
    return oracle, nop


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.ci
def test_oracle_passes_and_nop_fails_quick_subset(tmp_path: Path) -> None:
    oracle, nop = _oracle_and_nop(tmp_path, QUICK)
    assert sorted(r["task_id"] for r in oracle) == sorted(QUICK)
    failing = {r["task_id"]: r["test_output"] for r in oracle if not r["passed"]}
    assert not failing, failing
    assert all(
        r["reward"] == 1.0 and r["failure_mode"] is None and not r["over_budget"] for r in oracle
    )
    assert not any(r["passed"] for r in nop)
    assert all(r["failure_mode"] == "wrong-result" and r["tests_passed"] is False for r in nop)
    assert all(r["transcript"] is None for r in oracle + nop)  # neither takes turns
    assert "<img" in (tmp_path / "oracle.html").read_text()


@pytest.mark.podman
@pytest.mark.slow
def test_oracle_passes_and_nop_fails_every_fixture(tmp_path: Path) -> None:
    all_ids = [t.id for t in import_task_folders([FIXTURES]).tasks]
    oracle, nop = _oracle_and_nop(tmp_path, all_ids)
    assert len(oracle) == len(nop) == len(all_ids) == 6
    failing = {r["task_id"]: r["test_output"] for r in oracle if not r["passed"]}
    assert not failing, failing
    assert {r["task_id"] for r in nop if r["passed"]} == set()


@pytest.mark.podman
async def test_over_budget_oracle_is_flagged_in_a_real_sandbox(tmp_path: Path) -> None:
    # The file is written at once, then the solution idles past its 3 s budget.
    task = dataclasses.replace(
        fixture_task("hello-file"),
        id="slow-hello",
        agent_timeout_sec=3.0,
        solution_command="bash /solution/solve.sh",
        solution_files=[
            TaskFile("solve.sh", b"echo 'Hello, terminal!' > /app/hello.txt\nsleep 30\n", 0o755)
        ],
    )
    [row] = await run_trials(EvalConfig(agent="oracle", progress=False), [task])
    assert row["tests_passed"] is True  # the tests alone would pass ...
    assert row["passed"] is False and row["over_budget"] is True  # ... but the solve was too slow
    assert row["failure_mode"] == "timeout" and row["stop_reason"] == "lifetime"
    assert row["agent_sec"] < 15


@pytest.mark.podman
async def test_a_solve_that_breaks_the_sandbox_for_scoring_is_the_agents_failure() -> None:
    # What a policy ran on a "list the bash users" task: a rename loop over /bin/bash.
    task = dataclasses.replace(
        fixture_task("hello-file"),
        id="moves-bash",
        solution_command="bash /solution/solve.sh",
        solution_files=[
            TaskFile(
                "solve.sh",
                b"echo 'Hello, terminal!' > /app/hello.txt\n"
                b'for f in /bin/bash; do mv -- "$f" "${f%.bash}.txt"; done\n',
                0o755,
            )
        ],
    )
    [row] = await run_trials(EvalConfig(agent="oracle", progress=False), [task])
    assert (row["passed"], row["reward"], row["failure_type"]) == (False, 0.0, None), row
    assert row["failure_mode"] == "sandbox-broken"
    assert "cannot prepare /tests" in row["test_output"]


@pytest.mark.podman
async def test_a_trial_whose_scoring_raises_is_a_failed_row_and_the_others_still_run() -> None:
    # A test file that cannot be placed under /tests: scoring raises (ValueError, not a termrl error).
    hello = fixture_task("hello-file")
    bad = dataclasses.replace(
        hello, id="unscorable", test_files=[TaskFile("../escape.sh", b"exit 0\n", 0o755)]
    )
    rows = await run_trials(EvalConfig(agent="oracle", trials=2, progress=False), [bad, hello])
    by_task = {(r["task_id"], r["trial"]): r for r in rows}
    assert len(rows) == 4
    for trial in (0, 1):
        failed, passed = by_task[("unscorable", trial)], by_task[("hello-file", trial)]
        assert (
            failed["failure_type"] == "RewardFailed"
            and failed["passed"] is False
            and "escape" in failed["error"]
        )
        assert passed["passed"] is True, passed["test_output"]


@pytest.mark.podman
def test_an_image_that_does_not_build_gives_environment_error_rows(tmp_path: Path) -> None:
    broken = dataclasses.replace(
        fixture_task("hello-file"),
        id="broken-image",
        environment_files=[TaskFile("Dockerfile", b"FROM termrl/base:bookworm\nRUN exit 3\n")],
    )
    artifact = tmp_path / "tasks.parquet"
    save_tasks(artifact, [broken])
    rows = run_cli(
        "--tasks",
        str(artifact),
        "--agent",
        "oracle",
        "--trials",
        "2",
        "--out",
        str(tmp_path / "r.parquet"),
    )
    assert [r["trial"] for r in rows] == [0, 1]
    for row in rows:
        assert row["failure_mode"] == "environment-error" and row["failure_type"] == "EnvInitFailed"
        assert row["passed"] is False and row["error"]


@pytest.mark.podman
@pytest.mark.slow
def test_policy_agent_with_the_tiny_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    tasks = ["hello-file", "count-errors"]
    rows = run_cli(
        "--tasks",
        str(FIXTURES),
        "--agent",
        "policy",
        "--model",
        str(tiny_model_dir),
        "--task",
        tasks[0],
        "--task",
        tasks[1],
        "--max-turns",
        "2",
        "--max-new-tokens",
        "24",
        "--out",
        str(tmp_path / "policy.parquet"),
        "--report",
        str(tmp_path / "policy.html"),
    )
    assert sorted(r["task_id"] for r in rows) == sorted(tasks)
    for row in rows:
        # the episode really ran: turns, tokens fed and sampled, a stop reason, then the tests
        assert row["agent"] == "policy" and row["model"] == str(tiny_model_dir)
        assert 1 <= row["turns"] <= 2 and len(row["calls_per_turn"]) == row["turns"]
        assert row["prompt_tokens"] > 0 and 0 < row["completion_tokens"] <= 24 * row["turns"]
        assert row["stop_reason"] in ("done", "max-turns", "context-overflow", "lifetime")
        assert row["tests_passed"] is not None
        assert row["passed"] or row["failure_mode"] in FAILURE_MODES
        # what it ran: one entry per turn (a command, or why the turn had none)
        entries = [line for line in row["transcript"].splitlines() if not line.startswith("  ")]
        assert len(entries) >= row["turns"]
    html = (tmp_path / "policy.html").read_text()
    assert html.count("<img") == 8 and "policy:" in html


@pytest.mark.podman
async def test_policy_episode_stops_at_the_task_budget(tiny_model_dir: Path) -> None:
    from termrl.llm.hf_engine import TransformersEngine

    # A random model never calls done: only the 1 s agent budget can end this episode early.
    task = dataclasses.replace(fixture_task("hello-file"), id="short-budget", agent_timeout_sec=1.0)
    config = EvalConfig(
        agent="policy", model=str(tiny_model_dir), max_turns=200, max_new_tokens=8, progress=False
    )
    [row] = await run_trials(config, [task], engine=TransformersEngine(tiny_model_dir))
    assert row["stop_reason"] == "lifetime" and row["turns"] < 200
    assert row["over_budget"] is True and row["passed"] is False
    assert row["failure_mode"] == "timeout"
    assert row["tests_passed"] is False  # the tests still ran on the state the agent left


@pytest.mark.podman
@pytest.mark.slow
async def test_policy_agent_through_litellm(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from termrl.llm.hf_engine import TransformersEngine
    from termrl.llm.proxy import ModelProxy

    # A real OpenAI-compatible server (termrl's ModelProxy on the tiny model) behind litellm:.
    monkeypatch.setenv("OPENAI_API_KEY", "eval-test")
    async with ModelProxy(TransformersEngine(tiny_model_dir)) as proxy:
        config = EvalConfig(
            agent="policy",
            model="litellm:openai/tiny",
            api_base=proxy.base_url,
            max_turns=2,
            max_new_tokens=16,
            progress=False,
        )
        [row] = await run_trials(config, [fixture_task("hello-file")])
    assert row["model"] == "litellm:openai/tiny" and row["run_id"] == "litellm:openai/tiny"
    assert row["turns"] == 2 and row["stop_reason"] == "max-turns"
    assert row["failure_type"] is None, row["error"]
    assert row["tests_passed"] is False and row["failure_mode"] in FAILURE_MODES


class LeftoverSeeker:
    """An agent that looks for a task's tests, solution and reward file, and notes what it found."""

    name = "seeker"

    def __init__(self) -> None:
        self.found: list[str] = []

    async def act(self, session, task, trial: int, budget_sec: float, previous=None) -> TrialRun:
        look = "for p in /tests /solution /logs/verifier; do [ -e $p ] && echo FOUND $p; done; true"
        result = await session.exec(look, timeout=30)
        self.found.append(result.output.strip())
        return TrialRun(stop_reason="done", turns=1)


@pytest.mark.podman
async def test_eval_agents_never_see_the_images_set_up_leftovers(
    podman, monkeypatch: pytest.MonkeyPatch
) -> None:
    from termrl.sandbox import SandboxSpec

    # The image's set-up left a test file, a solution and a reward file at the paths scoring uses.
    dockerfile = (
        b"FROM termrl/base:bookworm\nWORKDIR /app\n"
        b"RUN mkdir -p /tests /solution /logs/verifier && echo 'assert True' > /tests/test_secret.py"
        b" && echo 'echo the answer' > /solution/solve.sh && echo 1 > /logs/verifier/reward.txt\n"
    )
    # The tests pass only when /tests holds the task's own test file, uploaded at scoring, and nothing else.
    test_sh = b"[ -e /tests/test.sh ] && [ ! -e /tests/test_secret.py ] && echo 1 > /logs/verifier/reward.txt\n"
    task = dataclasses.replace(
        fixture_task("hello-file"),
        id="leftovers",
        environment_files=[TaskFile("Dockerfile", dockerfile)],
        test_files=[TaskFile("test.sh", test_sh, 0o755)],
        test_command="bash /tests/test.sh",
    )
    async with await podman.create(
        SandboxSpec.from_task(task)
    ) as bare:  # the image does carry them
        assert (await bare.exec("ls /tests /solution /logs/verifier", timeout=30)).exit_code == 0
    seeker = LeftoverSeeker()
    monkeypatch.setattr("components.eval.trials.make_agent", lambda config, engine: seeker)
    rows = await run_trials(EvalConfig(agent="nop", trials=2, progress=False), [task])
    assert seeker.found == ["", ""]
    assert [(r["tests_passed"], r["passed"], r["failure_type"]) for r in rows] == [
        (True, True, None)
    ] * 2


CREATE, APPEND = "Create /app/notes.txt", "Append the line"
"""Pieces of the two step instructions of the Harbor 1.4 ``multi-step`` fixture."""


class RecordingPolicy(PolicyAgent):
    """The policy agent, keeping each step's run and the ``previous`` it was handed."""

    def __init__(self, engine, config: EvalConfig) -> None:
        super().__init__(engine, config)
        self.calls: list[tuple[TrialRun | None, TrialRun]] = []

    async def act(self, session, task, trial, budget_sec, previous=None) -> TrialRun:
        run = await super().act(session, task, trial, budget_sec, previous)
        self.calls.append((previous, run))
        return run


@pytest.mark.podman
async def test_policy_agent_continues_one_conversation_across_the_steps(
    base_images, tiny_tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step 1: one command, then done; step 2 likewise. Both solve their step.
    policy = StepsPolicy(
        tiny_tokenizer,
        {
            CREATE: [bash_call("echo first > /app/notes.txt"), DONE],
            APPEND: [bash_call("echo second >> /app/notes.txt"), DONE],
        },
    )
    config = EvalConfig(agent="policy", model="steps-policy", max_turns=3, progress=False)
    agent = RecordingPolicy(policy, config)
    monkeypatch.setattr("components.eval.trials.make_agent", lambda config, engine: agent)
    [row] = await run_trials(config, [read_task_folder(HARBOR14 / "multi-step")], engine=policy)
    assert (row["passed"], row["reward"], row["failure_type"]) == (True, 1.0, None), row
    assert row["test_output"].count("=== step ") == 2 and row["turns"] == 4

    [(first_previous, first), (second_previous, second)] = agent.calls
    assert first_previous is None and second_previous is first  # step 2 was handed step 1's run
    # Chunks number on across the steps: one stream, 0..3.
    assert [c.chunk_index for c in first.chunks + second.chunks] == [0, 1, 2, 3]
    # One conversation: one system prompt; step 2's instruction is a user turn after step 1's
    # turns (its command, the output, its done), followed by step 2's own turns.
    messages = second.episode.messages
    assert [m["role"] for m in messages] == [
        "system",
        "user",  # step 1's instruction
        "assistant",  # echo first
        "user",  # its output
        "assistant",  # done
        "user",  # step 2's instruction
        "assistant",  # echo second
        "user",  # its output
    ]
    assert CREATE in messages[1]["content"] and APPEND in messages[5]["content"]
    assert "echo first" in messages[2]["content"] and '"done"' in messages[4]["content"]
    assert first.episode.messages is messages  # the same conversation, extended
    # Token for token: step 2's first prompt extends everything step 1 fed and sampled.
    step1_last, step2_first = policy.fed[1], policy.fed[2]
    assert step2_first[: len(step1_last)] == step1_last
    assert APPEND in tiny_tokenizer.decode(step2_first[len(step1_last) :])
    # The row counts the one stream once, not step by step.
    assert (
        row["episode_tokens"]
        == second.episode_tokens
        == len(policy.fed[-1]) + len(second.chunks[-1].response_ids)
    )


class FailingAgent:
    """An agent whose every step fails (an engine error, say); notes the steps it was given."""

    name = "failing"

    def __init__(self) -> None:
        self.steps: list[str] = []

    async def act(self, session, task, trial: int, budget_sec: float, previous=None) -> TrialRun:
        self.steps.append(task.instruction)
        return TrialRun(stop_reason="error", failure_type="ModelError", error="the model broke")


@pytest.mark.podman
async def test_a_step_whose_agent_failed_is_scored_and_ends_the_trial(
    base_images, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = read_task_folder(HARBOR14 / "multi-step")
    ungated = dataclasses.replace(task, steps=[{**s, "min_reward": None} for s in task.steps])
    agent = FailingAgent()
    monkeypatch.setattr("components.eval.trials.make_agent", lambda config, engine: agent)
    [row] = await run_trials(EvalConfig(agent="nop", progress=False), [ungated])
    assert len(agent.steps) == 1 and CREATE in agent.steps[0]  # step 2 never ran ...
    assert row["test_output"].count("=== step ") == 1  # ... after step 1 was scored
    assert (row["failure_type"], row["passed"], row["tests_passed"]) == ("ModelError", False, False)
