"""The sandbox checks: their pure parts here; a podman test of the state-replay mechanics.

The full checks run on real sandboxes in test_stage.py (the planted-defect corpus).
"""

from __future__ import annotations

import re

import pytest
import yaml

from components.verify.checks import (
    ablation_plan,
    check_flakiness,
    check_ground_truth,
    check_state_replay,
    process_match,
)
from components.verify.config import VerifyConfig
from components.verify.outcomes import CheckOutcome
from termrl.artifacts.tasks import Task, TaskFile
from termrl.sandbox import SandboxManager
from termrl.taskrun import TaskSandboxes

PROCESS = [re.compile(p, re.IGNORECASE) for p in VerifyConfig().process_patterns]
"""The default process words, compiled as the verify runner compiles them."""

SCRIPT = b"#!/bin/bash\nset -e\nmkdir -p /app/out\nsort a > /app/out/b\n"


def test_ablation_plan_of_a_harbor_script_rewrites_only_that_file():
    other = TaskFile("data.txt", b"keep me")
    task = Task(id="t", instruction="", solution_files=[TaskFile("solve.sh", SCRIPT, 0o755), other])
    plan = ablation_plan(task)
    assert plan is not None and plan.source == "solve.sh"
    assert plan.steps == ["set -e", "mkdir -p /app/out", "sort a > /app/out/b"]
    ablated = plan.without(1)
    files = {f.path: f for f in ablated.solution_files}
    assert files["solve.sh"].data == b"#!/bin/bash\nset -e\nsort a > /app/out/b\n"
    assert files["solve.sh"].mode == 0o755 and files["data.txt"] == other
    assert task.solution_files[0].data == SCRIPT  # the original task is untouched


def test_ablation_plan_of_a_legacy_solution_yaml_drops_one_entry():
    entries = [{"command": "cd /app"}, {"command": "make"}, {"command": "make install"}]
    task = Task(
        id="t",
        instruction="",
        solution_command="",
        solution_files=[TaskFile("solution.yaml", yaml.safe_dump(entries).encode())],
    )
    plan = ablation_plan(task)
    assert plan is not None and plan.steps == ["cd /app", "make", "make install"]
    kept = yaml.safe_load(plan.without(1).solution_files[0].data)
    assert [e["command"] for e in kept] == ["cd /app", "make install"]


def test_no_plan_when_the_command_runs_no_script_of_the_task():
    assert (
        ablation_plan(Task(id="t", instruction="", solution_command="python3 -c 'print(1)'"))
        is None
    )
    assert (
        ablation_plan(Task(id="t", instruction="", solution_command="bash /solution/missing.sh"))
        is None
    )


def test_default_inert_patterns_skip_shell_state_and_printing_only():
    inert = [re.compile(p) for p in VerifyConfig().inert_step_patterns]

    def is_inert(step: str) -> bool:
        return any(p.match(step) for p in inert)

    for step in (
        "set -euo pipefail",
        "cd /app",
        "export PATH=/x:$PATH",
        "X=1",
        'echo "done"',
        "f() {\n  tr a b\n}",
        "function g {\n :\n}",
        "sleep 0.5",
        "X=$HOME/y",
        'echo "made $X"',
    ):
        assert is_inert(step), step
    for step in (
        "echo 42 > /app/answer.txt",
        "cat a | tee b",
        "chmod +x /app/x",
        "mkdir -p /app/out",
        "for f in *; do gzip $f; done",
        "X=$(make)  && make install",
        "X=$(make)",
        "echo `make`",
        'echo "$(rm -f /app/x)"',
    ):
        assert not is_inert(step), step


def test_process_words_in_instructions():
    assert process_match("Run /app/poll.sh every 2 seconds in a loop", PROCESS) == "every 2 seconds"
    assert process_match("Start a web server listening on port 8080", PROCESS) == "server"
    assert process_match("Serve /srv/www over HTTP on port 8776", PROCESS) == "on port 8776"
    assert process_match("Write the sorted names to /app/sorted.txt", PROCESS) is None
    # A git hook is a file that git runs, as a crontab is one that cron reads.
    assert process_match("Add a pre-commit hook to the repo", PROCESS) is None


def test_process_words_in_names_of_data_do_not_ask_for_a_process():
    for instruction in (
        "A deploy script needs the `host` setting of the `server` section in /srv/a/manifest.json",
        "Write the value of `server.version` from /home/user/config.json to /home/user/v.txt",
        "Set port to 8080 in the [server] section of /etc/app.ini",
        "Set the server.port entry of app.properties to 9090",
        "Fix the off-by-one in /srv/app/server.py",
        "Make the effective settings: database port 5410, logging level warn",
        "Add a `daemon` key with the value true to settings.json",
    ):
        assert process_match(instruction, PROCESS) is None, instruction
    # The same words as prose still ask for one.
    assert (
        process_match("Restart the service so that the new `server.port` takes effect", PROCESS)
        == "service"
    )
    assert process_match("Run `python3 app.py` so it keeps running", PROCESS) == "keeps running"


def test_a_scheduled_cron_job_is_file_state_not_a_process():
    """A cron job is an entry in a file that the system's cron daemon reads: tests that read
    the entry and run its command check the whole outcome, and pass on replayed files."""
    for instruction in (
        "Install a cron job that runs backup.sh",
        "Schedule the script /usr/local/bin/sync.sh to run every 15 minutes as root, using root's crontab.",
        "Add an entry to root's crontab that runs every hour at minute 5 and deletes old files.",
        "Schedule /usr/local/bin/rotate to run every day at 03:00 with a system cron file /etc/cron.d/rotate.",
    ):
        assert process_match(instruction, PROCESS) is None, instruction
    # Starting cron itself is still a process.
    assert process_match("Start the cron daemon", PROCESS) == "daemon"


def runs(name: str, *values: bool | None) -> CheckOutcome:
    return CheckOutcome(name, "pass", "", runs=list(values))


def test_flakiness_compares_repeated_runs_of_the_same_state():
    assert (
        check_flakiness(
            runs("ground_truth", True, True, True), runs("noop", False, False, False)
        ).outcome
        == "pass"
    )
    mixed = check_flakiness(
        runs("ground_truth", True, False, True), runs("noop", False, True, False)
    )
    assert mixed.outcome == "fail"
    assert (
        "ground_truth: tests passed in 2/3" in mixed.reason
        and "noop: tests passed in 1/3" in mixed.reason
    )
    # consistent failures are not flakiness (the ground truth check names those)
    assert (
        check_flakiness(runs("ground_truth", False, False), runs("noop", True, True)).outcome
        == "pass"
    )
    assert check_flakiness(runs("ground_truth", True), runs("noop", False)).outcome == "skipped"
    assert (
        check_flakiness(runs("ground_truth", True, None), runs("noop", False, False)).outcome
        == "skipped"
    )


REPLAY_SOLUTION = b"""#!/bin/bash
set -e
# extraction keeps the archive's old mtimes: only the ctime shows the change
tar -xzf /app/old.tar.gz -C /app
rm /app/obsolete.txt
mkdir -p /etc/myapp && echo 'mode=fast' > /etc/myapp/conf
chmod 600 /etc/myapp/conf
"""
REPLAY_TESTS = b"""#!/bin/bash
mkdir -p /logs/verifier
ok=1
[ "$(cat /app/extracted/old.txt 2>/dev/null)" = "from 2001" ] || ok=0
[ ! -e /app/obsolete.txt ] || ok=0
[ "$(stat -c %a /etc/myapp/conf 2>/dev/null)" = "600" ] || ok=0
grep -q mode=fast /etc/myapp/conf || ok=0
echo $ok > /logs/verifier/reward.txt
"""


def _old_archive() -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("extracted/old.txt")
        info.size, info.mtime = 9, 978307200  # 2001-01-01
        tar.addfile(info, io.BytesIO(b"from 2001"))
    return buffer.getvalue()


@pytest.mark.podman
@pytest.mark.slow
async def test_state_replay_carries_old_mtimes_deletions_and_modes(base_images):
    """Files extracted with old mtimes, a deleted file, a new folder and a chmod all reach
    the fresh sandbox: the tests pass there without the solution, so the replay passes;
    the instruction asks for no process, so the check does too — and with a process
    word in the instruction, the same result is a failure."""
    dockerfile = b"FROM termrl/base:bookworm\nWORKDIR /app\nCOPY old.tar.gz obsolete.txt /app/\n"
    task = Task(
        id="replay-mechanics",
        instruction="Unpack old.tar.gz, delete obsolete.txt, write the config.",
        environment_files=[
            TaskFile("Dockerfile", dockerfile),
            TaskFile("old.tar.gz", _old_archive()),
            TaskFile("obsolete.txt", b"bye\n"),
        ],
        solution_files=[TaskFile("solve.sh", REPLAY_SOLUTION, 0o755)],
        test_files=[TaskFile("test.sh", REPLAY_TESTS, 0o755)],
    )
    config = VerifyConfig()
    process = [re.compile(p, re.IGNORECASE) for p in config.process_patterns]
    async with SandboxManager(backend="podman", max_sessions=2) as manager:
        sandboxes = TaskSandboxes(manager)
        plain = await check_state_replay(
            sandboxes,
            task,
            exclude=config.replay_exclude,
            process_patterns=process,
            max_bytes=1 << 20,
        )
        task.instruction += " Then keep it running as a service."
        asked = await check_state_replay(
            sandboxes,
            task,
            exclude=config.replay_exclude,
            process_patterns=process,
            max_bytes=1 << 20,
        )
    assert plain.outcome == "pass" and plain.detail["tests_passed"] is True, plain
    assert plain.detail["deleted_paths"] == 1
    assert {"/app/extracted/old.txt", "/etc/myapp/conf"} <= set(plain.detail["changed_paths"])
    assert asked.outcome == "fail" and "service" in asked.reason


@pytest.mark.podman
async def test_a_reference_solution_that_changes_what_scoring_runs_fails_ground_truth(base_images):
    """Rollout masks an episode that shadowed a command the tests run, and eval fails it: a task whose
    own solution does so could never be passed cleanly, so verify rejects it."""
    solve = (
        b"#!/bin/bash\nprintf '#!/bin/sh\\nexec /usr/bin/grep \"$@\"\\n' > /usr/local/bin/grep\n"
        b"chmod 755 /usr/local/bin/grep\necho done > /app/out.txt\n"
    )
    tests = b"#!/bin/bash\ngrep -qx done /app/out.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    task = Task(
        id="shadows-grep",
        instruction="Write done to /app/out.txt.",
        environment_files=[TaskFile("Dockerfile", b"FROM termrl/base:bookworm\nWORKDIR /app\n")],
        solution_files=[TaskFile("solve.sh", solve, 0o755)],
        test_files=[TaskFile("test.sh", tests, 0o755)],
    )
    clean = Task(
        id="clean",
        instruction=task.instruction,
        environment_files=task.environment_files,
        solution_files=[TaskFile("solve.sh", b"#!/bin/bash\necho done > /app/out.txt\n", 0o755)],
        test_files=task.test_files,
    )
    async with SandboxManager(backend="podman", max_sessions=2) as manager:
        sandboxes = TaskSandboxes(manager)
        shadowed = await check_ground_truth(sandboxes, task, repeats=1)
        passed = await check_ground_truth(sandboxes, clean, repeats=1)
    assert (
        shadowed.outcome == "fail"
        and "/usr/local/bin/grep: shadows /usr/bin/grep" in shadowed.reason
    )
    assert passed.outcome == "pass", passed
