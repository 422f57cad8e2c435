"""Reading task folders: both layouts, nested trees, exact bytes, and every bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from termrl.errors import TaskFormatError
from termrl.taskfolders import find_task_folders, import_task_folders, read_task_folder

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tasks"


def files_by_path(files):
    return {f.path: f for f in files}


def test_the_fixture_tree_holds_six_tasks_in_both_layouts_and_nested_folders():
    folders, errors = find_task_folders([FIXTURES])
    assert errors == []
    assert sorted(p.relative_to(FIXTURES).as_posix() for p in folders) == [
        "harbor/archives/extract-blob",
        "harbor/count-errors",
        "harbor/hello-file",
        "legacy/csv-total",
        "legacy/reverse-words",
        "legacy/utilities/make-runnable",
    ]


def test_harbor_task_maps_task_toml_and_keeps_unmapped_keys():
    task = read_task_folder(FIXTURES / "harbor" / "hello-file")
    assert task.id == "hello-file"
    assert task.layout == "harbor" and task.source == "terminal-bench"
    assert task.instruction == (FIXTURES / "harbor/hello-file/instruction.md").read_text()
    assert (task.family, task.difficulty, task.tags) == ("files", "easy", ["echo", "files"])
    assert (task.agent_timeout_sec, task.verifier_timeout_sec, task.build_timeout_sec) == (
        120.0,
        60.0,
        300.0,
    )
    assert (task.cpus, task.memory_mb, task.storage_mb) == (1.0, 1024, 2048)
    assert task.metadata == {"version": "1.0", "metadata": {"author_name": "termrl fixtures"}}
    assert task.solution_command == "bash /solution/solve.sh"
    assert task.test_command == "bash /tests/test.sh" and task.scoring == "reward-file"
    assert [f.path for f in task.test_files] == ["test.sh"]


def test_harbor_defaults_apply_when_task_toml_is_silent_and_memory_strings_are_read():
    task = read_task_folder(FIXTURES / "harbor" / "archives" / "extract-blob")
    assert task.memory_mb == 1024  # memory = "1G"
    assert task.build_timeout_sec == 600.0 and task.cpus == 1.0


def test_harbor_deprecated_memory_and_storage_strings_become_megabytes_and_leave_the_metadata():
    task = read_task_folder(FIXTURES.parent / "tb-corpus" / "python-on-path")
    assert (task.memory_mb, task.storage_mb) == (1024, 2048)  # memory = "1G", storage = "2G"
    assert "environment" not in task.metadata  # only the *_mb fields say it (export writes them)


@pytest.mark.parametrize(
    ("environment", "problem"),
    [
        (
            'memory = "1G"\nmemory_mb = 2048',
            "[environment].memory = '1G' (1024 MB) conflicts with [environment].memory_mb = 2048",
        ),
        (
            'storage = "2G"\nstorage_mb = 10240',
            "[environment].storage = '2G' (2048 MB) conflicts with [environment].storage_mb = 10240",
        ),
        (
            'memory = "lots"',
            '[environment].memory must be a size such as "512M" or "2G", got \'lots\'',
        ),
        ("storage = 2048", '[environment].storage must be a size such as "512M" or "2G", got 2048'),
    ],
)
def test_harbor_memory_and_storage_strings_that_conflict_or_do_not_parse_are_refused(
    tmp_path, environment, problem
):
    folder = make_harbor(tmp_path / "sized", toml=f"[environment]\n{environment}\n")
    with pytest.raises(TaskFormatError) as info:
        read_task_folder(folder)
    assert problem in str(info.value)


def test_harbor_memory_string_that_agrees_with_memory_mb_is_accepted(tmp_path):
    toml = '[environment]\nmemory = "512M"\nmemory_mb = 512\nstorage = "1.5G"\n'
    task = read_task_folder(make_harbor(tmp_path / "sized", toml=toml))
    assert (task.memory_mb, task.storage_mb, task.metadata) == (512, 1536, {})


def test_binary_files_nested_paths_and_executable_bits_are_kept_exactly():
    blob = read_task_folder(FIXTURES / "harbor" / "archives" / "extract-blob")
    env = files_by_path(blob.environment_files)
    assert (
        env["blob.tar.gz"].data
        == (FIXTURES / "harbor/archives/extract-blob/environment/blob.tar.gz").read_bytes()
    )
    assert env["blob.tar.gz"].data[:2] == b"\x1f\x8b"
    assert blob.solution_files[0].executable and not env["Dockerfile"].executable
    logs = read_task_folder(FIXTURES / "harbor" / "count-errors")
    assert sorted(files_by_path(logs.environment_files)) == [
        "Dockerfile",
        "logs/2026/app.log",
        "logs/boot.log",
        "logs/notes.txt",
    ]


def test_legacy_task_maps_task_yaml_run_tests_and_tests_folder():
    task = read_task_folder(FIXTURES / "legacy" / "reverse-words")
    assert task.layout == "legacy" and task.scoring == "pytest-report"
    assert task.instruction.startswith("The file /app/words.txt")
    assert (task.family, task.difficulty, task.tags) == ("text-processing", "easy", ["tac", "text"])
    assert (task.agent_timeout_sec, task.verifier_timeout_sec) == (180.0, 30.0)
    assert sorted(files_by_path(task.environment_files)) == ["Dockerfile", "words.txt"]
    assert sorted(files_by_path(task.test_files)) == ["run-tests.sh", "test_outputs.py"]
    assert task.test_command == "bash /tests/run-tests.sh"
    assert task.solution_command == "bash /solution/solution.sh"
    assert task.metadata == {
        "metadata": {
            "author_email": "fixtures@termrl.invalid",
            "parser_name": "pytest",
            "run_tests_in_same_shell": False,
        }
    }


def test_legacy_solution_yaml_compose_file_and_old_descriptions_form():
    runnable = read_task_folder(FIXTURES / "legacy" / "utilities" / "make-runnable")
    assert [f.path for f in runnable.solution_files] == ["solution.yaml"]
    assert runnable.solution_command is None
    assert "docker-compose.yaml" in files_by_path(runnable.environment_files)
    csv_task = read_task_folder(FIXTURES / "legacy" / "csv-total")
    assert csv_task.instruction.startswith("/app/sales.csv has a header row")
    assert "data/expected.json" in files_by_path(csv_task.test_files)
    assert (csv_task.agent_timeout_sec, csv_task.verifier_timeout_sec) == (360.0, 60.0)


def make_harbor(
    folder: Path, *, instruction="Do it.", toml='version = "1.0"\n', tests=True
) -> Path:
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text("FROM termrl/base:bookworm\n")
    if instruction is not None:
        (folder / "instruction.md").write_text(instruction)
    (folder / "task.toml").write_text(toml)
    if tests:
        (folder / "tests").mkdir()
        (folder / "tests" / "test.sh").write_text("#!/bin/bash\n")
    return folder


def make_legacy(folder: Path, *, yaml_text="instruction: do it\n") -> Path:
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(yaml_text)
    (folder / "Dockerfile").write_text("FROM termrl/base:bookworm\n")
    (folder / "run-tests.sh").write_text("#!/bin/bash\n")
    return folder


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (
            lambda p: make_harbor(p, instruction=None),
            "no instruction (instruction.md missing or empty)",
        ),
        (
            lambda p: make_harbor(p, instruction="  \n"),
            "no instruction (instruction.md missing or empty)",
        ),
        (lambda p: make_harbor(p, tests=False), "no tests (tests/test.sh missing)"),
        (lambda p: make_harbor(p, toml="version = \n"), "unreadable task.toml"),
        (
            lambda p: make_harbor(p, toml="[agent]\ntimeout_sec = 'long'\n"),
            "[agent].timeout_sec must be a number",
        ),
        (lambda p: make_legacy(p, yaml_text="difficulty: easy\n"), "no instruction in task.yaml"),
        (lambda p: make_legacy(p, yaml_text="instruction: [unclosed\n"), "unreadable task.yaml"),
        (
            lambda p: make_legacy(p, yaml_text="- just\n- a list\n"),
            "unreadable task.yaml: not a mapping",
        ),
    ],
)
def test_bad_folders_are_rejected_with_one_line_naming_folder_and_problem(tmp_path, build, problem):
    folder = build(tmp_path / "bad-task")
    with pytest.raises(TaskFormatError) as info:
        read_task_folder(folder)
    message = str(info.value)
    assert message.startswith(f"{folder}: ") and problem in message
    assert "\n" not in message


def test_legacy_without_run_tests_is_rejected(tmp_path):
    folder = make_legacy(tmp_path / "no-tests")
    (folder / "run-tests.sh").unlink()
    with pytest.raises(TaskFormatError, match="no tests"):
        read_task_folder(folder)


def test_a_symlink_escaping_the_folder_is_rejected(tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    folder = make_harbor(tmp_path / "leaky")
    os.symlink(secret, folder / "environment" / "secret.txt")
    with pytest.raises(
        TaskFormatError, match=r"environment/secret.txt is a symlink escaping the folder"
    ):
        read_task_folder(folder)
    (folder / "environment" / "secret.txt").unlink()
    os.symlink("../../host-secret.txt", folder / "tests" / "data.txt")
    with pytest.raises(TaskFormatError, match="escaping the folder"):
        read_task_folder(folder)


def test_a_symlink_inside_the_folder_is_read_as_its_target(tmp_path):
    folder = make_harbor(tmp_path / "linked")
    (folder / "environment" / "real.txt").write_bytes(b"data\x00")
    os.symlink("real.txt", folder / "environment" / "alias.txt")
    env = files_by_path(read_task_folder(folder).environment_files)
    assert env["alias.txt"].data == b"data\x00"


def test_odd_mode_bits_are_kept(tmp_path):
    folder = make_harbor(tmp_path / "modes")
    secret = folder / "environment" / "key.pem"
    secret.write_bytes(b"k")
    os.chmod(secret, 0o600)
    os.chmod(folder / "tests" / "test.sh", 0o750)
    task = read_task_folder(folder)
    assert files_by_path(task.environment_files)["key.pem"].mode == 0o600
    assert task.test_files[0].mode == 0o750


def test_import_collects_every_bad_folder_and_keeps_the_good_ones(tmp_path):
    make_harbor(tmp_path / "tree" / "good")
    make_harbor(tmp_path / "tree" / "no-instruction", instruction=None)
    make_legacy(tmp_path / "tree" / "deep" / "bad-yaml", yaml_text=": :\n  - [\n")
    report = import_task_folders([tmp_path / "tree", tmp_path / "missing"])
    assert [t.id for t in report.tasks] == ["good"]
    problems = sorted(str(e) for e in report.errors)
    assert len(problems) == 3
    assert any("missing: not a folder" in p for p in problems)
    assert any("no-instruction: no instruction" in p for p in problems)
    assert any("bad-yaml: unreadable task.yaml" in p for p in problems)


def test_a_folder_without_tasks_and_duplicate_ids_are_reported(tmp_path):
    (tmp_path / "empty").mkdir()
    make_harbor(tmp_path / "a" / "same")
    make_harbor(tmp_path / "b" / "same")
    report = import_task_folders([tmp_path / "empty", tmp_path / "a", tmp_path / "b"])
    assert len(report.tasks) == 1
    messages = [str(e) for e in report.errors]
    assert any("no task folders found" in m for m in messages)
    assert any("duplicate task id 'same'" in m for m in messages)
