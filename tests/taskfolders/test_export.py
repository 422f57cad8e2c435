"""Export to Harbor folders: byte-exact files, and import → export → import is the identity.

A legacy (Terminal-Bench 1.0) task gets a generated ``tests/test.sh``, which
Harbor runs: its scoring is checked here against termrl's own rule with bash,
and (slow) in a podman sandbox after the oracle and after doing nothing. Its
solution (``solution.sh``, or a ``solution.yaml`` of commands) likewise gets a
generated ``solution/solve.sh``, Harbor's oracle: run here with bash, and in the
slow test as the oracle of the exported tasks read back as plain Harbor tasks.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import tomli_w

from termrl.artifacts import Task, TaskFile, load_tasks, save_tasks
from termrl.errors import TaskFormatError
from termrl.reward import parse_pytest_report
from termrl.taskfolders import export_task, export_tasks, import_task_folders, read_task_folder
from termrl.taskfolders.layout import harbor_solve_sh, harbor_test_sh
from termrl.taskrun import solution_steps

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tasks"
ALL_FIXTURES = [FIXTURES] + [
    FIXTURES.parent / name for name in ("terminal-bench", "tb-corpus", "harbor-1.4")
]


def tree(folder: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file below ``folder``: bytes and whether it is executable."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), os.access(p, os.X_OK))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("fixtures", ALL_FIXTURES, ids=lambda p: p.name)
def test_import_export_import_gives_identical_rows_for_every_fixture(tmp_path, fixtures):
    first = import_task_folders([fixtures])
    assert len(first.tasks) >= 3 and not first.errors
    export_tasks(first.tasks, tmp_path / "out")
    second = import_task_folders([tmp_path / "out"])
    assert not second.errors
    assert sorted((t.to_row() for t in second.tasks), key=lambda r: r["id"]) == sorted(
        (t.to_row() for t in first.tasks), key=lambda r: r["id"]
    )
    # Twice round gives the same folders, byte for byte.
    export_tasks(second.tasks, tmp_path / "again")
    assert tree(tmp_path / "again") == tree(tmp_path / "out")
    # Every single-step folder is one Harbor runs: its oracle and its verifier are there.
    exported = tree(tmp_path / "out")
    for task in first.tasks:
        if not task.steps:
            assert f"{task.id}/tests/test.sh" in exported
            assert (f"{task.id}/solution/solve.sh" in exported) == bool(solution_steps(task))


def test_harbor_export_reproduces_the_original_files_byte_for_byte(tmp_path):
    for name in ("harbor/hello-file", "harbor/count-errors", "harbor/archives/extract-blob"):
        original = FIXTURES / name
        exported = export_task(read_task_folder(original), tmp_path)
        ours, theirs = tree(exported), tree(original)
        del ours["task.toml"], theirs["task.toml"]  # regenerated from the parsed values
        assert ours == theirs
        # Every key the original said is said again (defaults may be spelled out), Harbor's
        # deprecated memory = "1G" as memory_mb = 1024 (Harbor refuses both side by side).
        ours_toml = tomllib.loads((exported / "task.toml").read_text())
        for section, values in tomllib.loads((original / "task.toml").read_text()).items():
            if isinstance(values, dict):
                if "memory" in values:
                    values["memory_mb"] = {"1G": 1024}[values.pop("memory")]
                assert {k: ours_toml[section][k] for k in values} == values
            else:
                assert ours_toml[section] == values


def test_legacy_export_is_a_harbor_folder_that_records_its_commands(tmp_path):
    exported = export_task(read_task_folder(FIXTURES / "legacy" / "reverse-words"), tmp_path)
    files = tree(exported)
    assert (
        files["environment/words.txt"][0]
        == (FIXTURES / "legacy/reverse-words/words.txt").read_bytes()
    )
    assert files["tests/run-tests.sh"] == (
        (FIXTURES / "legacy/reverse-words/run-tests.sh").read_bytes(),
        True,
    )
    assert "tests/test_outputs.py" in files and "solution/solution.sh" in files
    # Harbor runs tests/test.sh: a generated one runs run-tests.sh and scores pytest's report.
    assert files["tests/test.sh"] == (
        harbor_test_sh("bash /tests/run-tests.sh", "pytest-report"),
        True,
    )
    config = tomllib.loads((exported / "task.toml").read_text())
    # Harbor's oracle runs solution/solve.sh: a generated one runs solution.sh as termrl does.
    assert files["solution/solve.sh"] == (harbor_solve_sh(["bash /solution/solution.sh"]), True)
    config = tomllib.loads((exported / "task.toml").read_text())
    assert config["metadata"]["termrl"] == {
        "layout": "legacy",
        "solution_command": "bash /solution/solution.sh",
        "test_command": "bash /tests/run-tests.sh",
        "scoring": "pytest-report",
        "generated_test_sh": True,
        "generated_solve_sh": True,
    }
    assert config["metadata"]["category"] == "text-processing"
    # Import leaves the generated files out again.
    back = read_task_folder(exported)
    assert sorted(f.path for f in back.test_files) == ["run-tests.sh", "test_outputs.py"]
    assert [f.path for f in back.solution_files] == ["solution.sh"]


def test_a_solution_yaml_exports_a_solve_sh_that_runs_its_commands_in_order(tmp_path):
    task = read_task_folder(FIXTURES / "legacy" / "utilities" / "make-runnable")
    exported = export_task(task, tmp_path)
    assert (exported / "solution" / "solve.sh").read_bytes() == harbor_solve_sh(
        ["chmod +x /app/greet.sh", "/app/greet.sh"]
    )
    ours = tomllib.loads((exported / "task.toml").read_text())["metadata"]["termrl"]
    # "" says: no single command (the yaml's run one by one), and not Harbor's solve.sh.
    assert (ours["solution_command"], ours["generated_solve_sh"]) == ("", True)
    back = read_task_folder(exported)
    assert [f.path for f in back.solution_files] == ["solution.yaml"]
    assert back.to_row() == task.to_row()


def test_a_task_with_no_solution_gets_no_solve_sh(tmp_path):
    task = read_task_folder(FIXTURES / "legacy" / "reverse-words")
    task = replace(task, solution_files=[], solution_command=None)
    exported = export_task(task, tmp_path)
    assert not (exported / "solution").exists()
    ours = tomllib.loads((exported / "task.toml").read_text())["metadata"]["termrl"]
    assert "generated_solve_sh" not in ours
    assert read_task_folder(exported).to_row() == task.to_row()


def test_a_legacy_task_with_its_own_test_sh_keeps_it_and_gets_none_generated(tmp_path, caplog):
    task = read_task_folder(FIXTURES / "legacy" / "reverse-words")
    own = TaskFile("test.sh", b"#!/bin/bash\necho mine\n", 0o755)
    task = replace(task, test_files=sorted([*task.test_files, own], key=lambda f: f.path))
    with caplog.at_level(logging.WARNING, logger="termrl.taskfolders.export"):
        exported = export_task(task, tmp_path)
    assert (exported / "tests" / "test.sh").read_bytes() == own.data
    assert (
        "generated_test_sh"
        not in tomllib.loads((exported / "task.toml").read_text())["metadata"]["termrl"]
    )
    assert "Harbor will run its own tests/test.sh" in caplog.text
    assert read_task_folder(exported).to_row() == task.to_row()


def test_a_legacy_task_with_its_own_solve_sh_keeps_it_and_gets_none_generated(tmp_path, caplog):
    task = read_task_folder(FIXTURES / "legacy" / "reverse-words")
    own = TaskFile("solve.sh", b"#!/bin/bash\necho mine\n", 0o755)
    task = replace(task, solution_files=sorted([*task.solution_files, own], key=lambda f: f.path))
    with caplog.at_level(logging.WARNING, logger="termrl.taskfolders.export"):
        exported = export_task(task, tmp_path)
    assert (exported / "solution" / "solve.sh").read_bytes() == own.data
    ours = tomllib.loads((exported / "task.toml").read_text())["metadata"]["termrl"]
    assert "generated_solve_sh" not in ours
    assert ours["solution_command"] == "bash /solution/solution.sh"
    assert "Harbor will run its own solution/solve.sh" in caplog.text
    assert read_task_folder(exported).to_row() == task.to_row()


@pytest.mark.parametrize(
    ("fixture", "script", "marker"),
    [
        ("reverse-words", "tests/test.sh", "generated_test_sh"),
        ("reverse-words", "solution/solve.sh", "generated_solve_sh"),
        ("utilities/make-runnable", "solution/solve.sh", "generated_solve_sh"),
    ],
)
def test_an_edited_generated_script_is_refused_not_dropped(tmp_path, fixture, script, marker):
    exported = export_task(read_task_folder(FIXTURES / "legacy" / fixture), tmp_path)
    (exported / script).write_bytes((exported / script).read_bytes() + b"echo edited\n")
    with pytest.raises(TaskFormatError, match=f"{script} is not the one termrl generated"):
        read_task_folder(exported)
    # Without the marker it is one of the task's own files.
    config = tomllib.loads((exported / "task.toml").read_text())
    del config["metadata"]["termrl"][marker]
    (exported / "task.toml").write_text(tomli_w.dumps(config))
    back = read_task_folder(exported)
    files = back.test_files if script.startswith("tests/") else back.solution_files
    assert script.split("/")[1] in {f.path for f in files}


@pytest.mark.parametrize(
    ("marker", "command"),
    [("generated_test_sh", "test_command"), ("generated_solve_sh", "solution_command")],
)
@pytest.mark.parametrize("broken", ["not true", "no command"])
def test_a_marker_that_is_not_true_or_has_no_command_is_refused(tmp_path, marker, command, broken):
    exported = export_task(read_task_folder(FIXTURES / "legacy" / "reverse-words"), tmp_path)
    config = tomllib.loads((exported / "task.toml").read_text())
    if broken == "not true":
        config["metadata"]["termrl"][marker] = "yes"
    else:
        del config["metadata"]["termrl"][command]
    (exported / "task.toml").write_text(tomli_w.dumps(config))
    with pytest.raises(
        TaskFormatError, match=f"{marker} must be true, and only beside a {command}"
    ):
        read_task_folder(exported)


PYTEST_OUTPUTS = [
    "PASSED test_outputs.py::test_a\nPASSED test_outputs.py::test_b\n",
    "PASSED test_outputs.py::test_a\nFAILED test_outputs.py::test_b - assert 1 == 2\n",
    "PASSED test_outputs.py::test_a\nERROR test_outputs.py::test_b\n",
    "============ no tests ran ============\n",
    "PASSEDX not a report line\n  PASSED indented\n",
    "PASSED\n",
    "noise\r\nPASSED test_outputs.py::test_a\r\n",
]


@pytest.mark.parametrize("output", PYTEST_OUTPUTS)
def test_generated_test_sh_scores_pytest_reports_as_termrl_does(tmp_path, output):
    """The bash rule in the generated test.sh agrees with ``parse_pytest_report`` line for line."""
    (tmp_path / "report.txt").write_text(output, newline="")
    command = f'test "$TEST_DIR" = /tests && cat {tmp_path}/report.txt && echo noise >&2'
    script = harbor_test_sh(command, "pytest-report").replace(
        b"/logs/verifier", str(tmp_path / "verifier").encode()
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == output + "noise\n"  # streamed, stderr with stdout
    reward = (tmp_path / "verifier" / "reward.txt").read_text()
    assert reward == f"{int(parse_pytest_report(output))}\n"


def test_generated_test_sh_for_reward_file_scoring_falls_back_to_the_exit_status(tmp_path):
    for command, reward in (
        ("echo 0.5 > /logs/verifier/reward.txt; exit 1", "0.5\n"),
        ("true", "1\n"),
        ("false", "0\n"),
    ):
        script = harbor_test_sh(command, "reward-file").replace(
            b"/logs/verifier", str(tmp_path / "verifier").encode()
        )
        subprocess.run(["bash", "-c", script], check=True, timeout=30)
        assert (tmp_path / "verifier" / "reward.txt").read_text() == reward


def test_generated_solve_sh_runs_each_command_as_termrl_does(tmp_path):
    """In order whatever their status, each in a subshell of the working directory (a cd, an
    exit or a parse error stays in its command), stdin /dev/null, the last one's status out."""
    (tmp_path / "work").mkdir()
    commands = [
        "pwd; cd /; exit 3",
        "pwd > first.txt; echo 'quoted $HOME' \"$((1 + 1))\"",
        "if then fi",  # a parse error: this command fails, the next still runs
        "read -r line || echo 'no stdin'; x=1",
        "cat <<EOF\nheredoc ${x:-unset}\nEOF\nexit 4",
    ]
    done = subprocess.run(
        ["bash", "-c", harbor_solve_sh(commands)],
        cwd=tmp_path / "work",
        input=b"not for the solution\n",
        capture_output=True,
        timeout=30,
    )
    work = str(tmp_path / "work")
    assert done.stdout.decode() == f"{work}\nquoted $HOME 2\nno stdin\nheredoc unset\n"
    assert (tmp_path / "work" / "first.txt").read_text() == f"{work}\n"
    assert b"syntax error" in done.stderr
    assert done.returncode == 4


def test_generated_task_fields_round_trip_through_a_folder(tmp_path):
    task = Task(
        id="gen-1",
        instruction="Sort it.\r\nThen stop.",  # CRLF kept as is
        family="text",
        difficulty="hard",
        tags=["sort"],
        environment_files=[
            TaskFile("Dockerfile", b"FROM termrl/base:bookworm\n"),
            TaskFile("bin/tool", b"\x7fELF\x00\x01", 0o750),
        ],
        solution_files=[TaskFile("solve.sh", b"#!/bin/bash\nsort\n", 0o755)],
        test_files=[TaskFile("test.sh", b"#!/bin/bash\n", 0o755)],
        seed=42,
        perturbations=["remove-tool:tac"],
        adaptations={"base_image": {"from": "python:3.13", "to": "termrl/base:bookworm"}},
    )
    back = read_task_folder(export_task(task, tmp_path))
    assert back.to_row() == task.to_row()


def test_parquet_round_trip_then_export_matches_direct_export(tmp_path):
    tasks = import_task_folders([FIXTURES]).tasks
    save_tasks(tmp_path / "tasks.parquet", tasks)
    export_tasks(load_tasks(tmp_path / "tasks.parquet"), tmp_path / "via-parquet")
    export_tasks(tasks, tmp_path / "direct")
    assert tree(tmp_path / "via-parquet") == tree(tmp_path / "direct")


def test_export_refuses_to_overwrite_unless_asked(tmp_path):
    task = read_task_folder(FIXTURES / "harbor" / "hello-file")
    export_task(task, tmp_path)
    with pytest.raises(FileExistsError, match="hello-file"):
        export_tasks([task], tmp_path)
    export_tasks([task], tmp_path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hello-file"]


@pytest.mark.slow
@pytest.mark.podman
def test_generated_test_sh_writes_reward_1_after_the_oracle_and_0_after_nop(base_images, tmp_path):
    """Run as Harbor runs them: the exported legacy tasks, read back as plain Harbor tasks (no
    ``[metadata.termrl]`` at all), run ``bash /solution/solve.sh`` as the oracle and
    ``bash /tests/test.sh`` as the verifier in a podman sandbox, and their reward is what the
    generated test.sh wrote to /logs/verifier/reward.txt after the generated solve.sh ran the
    task's solution.sh or solution.yaml."""
    from components.eval.config import EvalConfig
    from components.eval.stage import main
    from termrl.artifacts.eval_results import read_eval_results

    legacy = [
        read_task_folder(FIXTURES / "legacy" / "reverse-words"),  # solution.sh, python3 -m pytest
        read_task_folder(FIXTURES / "legacy" / "utilities" / "make-runnable"),  # solution.yaml
        read_task_folder(FIXTURES.parent / "terminal-bench" / "yaml-to-json"),  # uv, offline kit
        read_task_folder(FIXTURES.parent / "terminal-bench" / "active-users"),  # solution.yaml, uv
    ]
    assert {t.solution_command for t in legacy} == {"bash /solution/solution.sh", None}
    for folder in export_tasks(legacy, tmp_path / "plain"):
        config = tomllib.loads((folder / "task.toml").read_text())
        del config["metadata"]["termrl"]
        (folder / "task.toml").write_text(tomli_w.dumps(config))
    plain = import_task_folders([tmp_path / "plain"]).tasks
    assert {(t.layout, t.solution_command, t.test_command, t.scoring) for t in plain} == {
        ("harbor", "bash /solution/solve.sh", "bash /tests/test.sh", "reward-file")
    }
    ids = sorted(t.id for t in plain)
    rows = {}
    for agent in ("oracle", "nop"):
        config = EvalConfig(
            tasks=str(tmp_path / "plain"),
            agent=agent,
            out=str(tmp_path / f"{agent}.parquet"),
            progress=False,
        )
        main(config)
        rows[agent] = {r["task_id"]: r for r in read_eval_results(config.out).to_pylist()}
    assert {t: r["reward"] for t, r in rows["oracle"].items()} == dict.fromkeys(ids, 1.0), {
        t: (r["error"], (r["test_output"] or "")[-1500:]) for t, r in rows["oracle"].items()
    }
    # Each nop trial reached the tests, which ran, failed and wrote 0 (not a broken environment).
    assert {t: (r["reward"], r["failure_mode"]) for t, r in rows["nop"].items()} == dict.fromkeys(
        ids, (0.0, "wrong-result")
    ), {t: (r["error"], (r["test_output"] or "")[-1500:]) for t, r in rows["nop"].items()}
