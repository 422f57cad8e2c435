"""Export to Harbor folders: byte-exact files, and import → export → import is the identity.

A legacy (Terminal-Bench 1.0) task gets a generated ``tests/test.sh``, which
Harbor runs: its scoring is checked here against termrl's own rule with bash,
and (slow) in a podman sandbox after the oracle and after doing nothing.
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
from termrl.taskfolders.layout import harbor_test_sh

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
    assert config["metadata"]["termrl"] == {
        "layout": "legacy",
        "solution_command": "bash /solution/solution.sh",
        "test_command": "bash /tests/run-tests.sh",
        "scoring": "pytest-report",
        "generated_test_sh": True,
    }
    assert config["metadata"]["category"] == "text-processing"
    # Import leaves the generated file out again.
    assert sorted(f.path for f in read_task_folder(exported).test_files) == [
        "run-tests.sh",
        "test_outputs.py",
    ]


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


def test_an_edited_generated_test_sh_is_refused_not_dropped(tmp_path):
    exported = export_task(read_task_folder(FIXTURES / "legacy" / "reverse-words"), tmp_path)
    test_sh = exported / "tests" / "test.sh"
    test_sh.write_bytes(test_sh.read_bytes() + b"echo edited\n")
    with pytest.raises(TaskFormatError, match="tests/test.sh is not the one termrl generated"):
        read_task_folder(exported)
    # Without the marker it is the task's own test file.
    config = tomllib.loads((exported / "task.toml").read_text())
    del config["metadata"]["termrl"]["generated_test_sh"]
    (exported / "task.toml").write_text(tomli_w.dumps(config))
    assert "test.sh" in {f.path for f in read_task_folder(exported).test_files}


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
    """Scored as Harbor scores them: the exported legacy tasks, read back as plain Harbor tasks
    (of ``[metadata.termrl]`` only the solution command kept, since Harbor's oracle runs
    solution/solve.sh), run ``bash /tests/test.sh`` in a podman sandbox, and their reward is
    what the generated test.sh wrote to /logs/verifier/reward.txt."""
    from components.eval.config import EvalConfig
    from components.eval.stage import main
    from termrl.artifacts.eval_results import read_eval_results

    legacy = [
        read_task_folder(FIXTURES / "legacy" / "reverse-words"),  # python3 -m pytest
        read_task_folder(FIXTURES.parent / "terminal-bench" / "yaml-to-json"),  # uv, offline kit
    ]
    for folder in export_tasks(legacy, tmp_path / "plain"):
        config = tomllib.loads((folder / "task.toml").read_text())
        ours = config["metadata"].pop("termrl")
        config["metadata"]["termrl"] = {"solution_command": ours["solution_command"]}
        (folder / "task.toml").write_text(tomli_w.dumps(config))
    plain = import_task_folders([tmp_path / "plain"]).tasks
    assert {(t.layout, t.test_command, t.scoring) for t in plain} == {
        ("harbor", "bash /tests/test.sh", "reward-file")
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
