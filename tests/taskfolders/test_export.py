"""Export to Harbor folders: byte-exact files, and import → export → import is the identity."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from termrl.artifacts import Task, TaskFile, load_tasks, save_tasks
from termrl.taskfolders import export_task, export_tasks, import_task_folders, read_task_folder

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tasks"


def tree(folder: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file below ``folder``: bytes and whether it is executable."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), os.access(p, os.X_OK))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_import_export_import_gives_identical_rows_for_every_fixture(tmp_path):
    first = import_task_folders([FIXTURES])
    assert len(first.tasks) == 6 and not first.errors
    export_tasks(first.tasks, tmp_path / "out")
    second = import_task_folders([tmp_path / "out"])
    assert not second.errors
    assert sorted((t.to_row() for t in second.tasks), key=lambda r: r["id"]) == sorted(
        (t.to_row() for t in first.tasks), key=lambda r: r["id"]
    )


def test_harbor_export_reproduces_the_original_files_byte_for_byte(tmp_path):
    for name in ("harbor/hello-file", "harbor/count-errors", "harbor/archives/extract-blob"):
        original = FIXTURES / name
        exported = export_task(read_task_folder(original), tmp_path)
        ours, theirs = tree(exported), tree(original)
        del ours["task.toml"], theirs["task.toml"]  # regenerated from the parsed values
        assert ours == theirs
        # Every key the original said is said again (defaults may be spelled out).
        ours_toml = tomllib.loads((exported / "task.toml").read_text())
        for section, values in tomllib.loads((original / "task.toml").read_text()).items():
            if isinstance(values, dict):
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
    config = tomllib.loads((exported / "task.toml").read_text())
    assert config["metadata"]["termrl"] == {
        "layout": "legacy",
        "solution_command": "bash /solution/solution.sh",
        "test_command": "bash /tests/run-tests.sh",
        "scoring": "pytest-report",
    }
    assert config["metadata"]["category"] == "text-processing"


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
