"""adapt: what is recorded on import, what builds and exports make of it (no sandbox here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from termrl.artifacts.tasks import Task, TaskFile, load_tasks, save_tasks
from termrl.sandbox.spec import SandboxSpec
from termrl.taskfolders import export_tasks, import_task_folders, read_task_folder
from termrl.taskfolders.layout import LEGACY_ROOT_FILES
from termrl.tbcompat.adapt import adaptations_for, with_adaptations
from termrl.tbcompat.kit import DEFAULT_UV_VERSION
from termrl.tbcompat.standins import NOBLE, PYTHON313_BOOKWORM

FIXTURES = Path(__file__).parents[1] / "fixtures"
TB = FIXTURES / "terminal-bench"
PY313 = "ghcr.io/laude-institute/t-bench/python-3-13:20250620"


def test_the_terminal_bench_fixtures_record_stand_ins_and_kits():
    tasks = {t.id: t for t in import_task_folders([TB]).tasks}
    assert set(tasks) == {"word-frequency", "yaml-to-json", "active-users", "sum-column"}
    expected = {  # task -> (FROM name, uv, pins, where found)
        "word-frequency": (PY313, "0.7.13", [["pytest==8.4.1"]], ["run-tests.sh"]),
        "yaml-to-json": (PY313, "0.7.13", [["pytest==8.4.1", "pyyaml==6.0.2"]], ["run-tests.sh"]),
        "active-users": (
            "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624",
            "0.7.13",
            [["pytest==8.4.1"]],
            ["setup-uv-pytest.sh"],
        ),
        "sum-column": (
            "python:3.13-slim-bookworm",
            "0.9.5",
            [["pytest==8.4.1", "pytest-json-ctrf==0.3.5", "pytest"]],
            ["test.sh"],
        ),
    }
    for task_id, (ref, uv, groups, found_in) in expected.items():
        adaptations = tasks[task_id].adaptations
        assert list(adaptations["base_images"]) == [ref]
        ubuntu = "ubuntu" in ref
        # Bookworm-based originals get bookworm with CPython 3.13 compiled, as they had it.
        assert adaptations["base_images"][ref]["image"] == (NOBLE if ubuntu else PYTHON313_BOOKWORM)
        assert adaptations["base_images"][ref]["differences"]
        kit = adaptations["test_kit"]
        assert (kit["uv"], kit["python"], kit["glibc"], kit["groups"], kit["found_in"]) == (
            uv,
            "3.13",
            "2.41" if ubuntu else "2.36",
            groups,
            found_in,
        )
        assert "notes" not in adaptations


def test_tasks_that_run_as_written_get_no_adaptations():
    for folder in (
        "tasks/harbor/hello-file",
        "tasks/legacy/csv-total",
        "tasks/legacy/utilities/make-runnable",
    ):
        assert read_task_folder(FIXTURES / folder).adaptations == {}


def test_unknown_bases_are_noted_and_the_kit_falls_back_to_bookworm():
    task = Task(
        id="t",
        instruction="x",
        environment_files=[TaskFile("Dockerfile", b"FROM registry.example.invalid/app:1\n")],
        test_files=[TaskFile("test.sh", b"uvx -w pytest==8.4.1 pytest /tests\n")],
    )
    adaptations = adaptations_for(task)
    assert "base_images" not in adaptations
    assert adaptations["test_kit"]["uv"] == DEFAULT_UV_VERSION  # uv used with no installer line
    assert (adaptations["test_kit"]["python"], adaptations["test_kit"]["glibc"]) == ("3.11", "2.36")
    assert any("registry.example.invalid/app:1" in n for n in adaptations["notes"])
    assert any("Python 3.11" in n for n in adaptations["notes"])


@pytest.mark.parametrize(
    ("base", "asked", "noted"),
    [
        ("python:3.13-slim-bookworm", "3.13", False),  # /usr/local/bin/python3.13
        ("python:3.13-slim-bookworm", "3.11", False),  # Debian's, asciinema's dependency
        ("python:3.13-slim-bookworm", "3.12", True),
        ("python:3.13-slim-trixie", "3.11", True),
    ],
)
def test_uv_interpreters_the_tests_ask_for_are_noted_when_the_image_lacks_them(base, asked, noted):
    task = Task(
        id="t",
        instruction="x",
        environment_files=[TaskFile("Dockerfile", f"FROM {base}\n".encode())],
        test_files=[TaskFile("test.sh", f"uvx -p {asked} -w pytest==8.4.1 pytest\n".encode())],
    )
    notes = adaptations_for(task).get("notes", [])
    assert any(f"ask uv for Python {asked}" in n for n in notes) == noted, notes


def test_with_adaptations_recomputes_its_keys_and_keeps_the_others():
    task = read_task_folder(TB / "word-frequency")
    task.adaptations = {
        "base_images": {"stale": {"image": "x"}},
        "notes": ["old"],
        "perturbed_by": "synthesize",
    }
    with_adaptations(task)
    assert list(task.adaptations["base_images"]) == [PY313]
    assert "notes" not in task.adaptations  # the stale note is gone, and nothing needs one now
    assert task.adaptations["perturbed_by"] == "synthesize"


def test_the_build_gets_the_stand_in_the_task_keeps_its_dockerfile():
    task = read_task_folder(TB / "word-frequency")
    original = (TB / "word-frequency" / "Dockerfile").read_bytes()
    spec = SandboxSpec.from_task(task)
    assert spec.base_image_rewrites == {PY313: PYTHON313_BOOKWORM}
    assert task.environment_file("Dockerfile").data == original
    built = next(f for f in spec.build_files() if f.path == "Dockerfile").data
    assert built == original.replace(PY313.encode(), PYTHON313_BOOKWORM.encode())
    # Same context without the rewrite is a different image.
    assert spec.image_key != SandboxSpec(environment_files=task.environment_files).image_key
    assert spec.network == "none"  # the test phase has no network


def _exported_path(task: Task, relative: str) -> str:
    """Where a file of the original folder lands in the exported Harbor folder."""
    if task.layout == "harbor":
        return relative
    if relative == "task.yaml":
        return ""
    if relative == "run-tests.sh":
        return "tests/run-tests.sh"
    if relative in LEGACY_ROOT_FILES:
        return f"solution/{relative}"
    return relative if relative.startswith("tests/") else f"environment/{relative}"


def test_import_export_import_keeps_every_original_byte_and_the_adaptations(tmp_path):
    tasks = import_task_folders([TB]).tasks
    save_tasks(tmp_path / "tasks.parquet", tasks)
    loaded = load_tasks(tmp_path / "tasks.parquet")
    assert [t.adaptations for t in loaded] == [t.adaptations for t in tasks]
    export_tasks(loaded, tmp_path / "out")
    again = {t.id: t for t in import_task_folders([tmp_path / "out"]).tasks}
    for task in tasks:
        assert again[task.id].to_row() == task.to_row()
        source = TB / task.id
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            relative = path.relative_to(source).as_posix()
            target = _exported_path(task, relative)
            if target in ("", "task.toml", "instruction.md"):
                continue  # task files are rewritten from the row, not copied
            exported = tmp_path / "out" / task.id / target
            assert exported.read_bytes() == path.read_bytes(), relative
            assert os.stat(exported).st_mode & 0o777 == os.stat(path).st_mode & 0o777, relative


@pytest.mark.parametrize("task_id", ["word-frequency", "active-users"])
def test_legacy_tasks_keep_the_official_test_layout(task_id):
    task = read_task_folder(TB / task_id)
    assert task.test_command == "bash /tests/run-tests.sh"
    assert task.scoring == "pytest-report"
    assert "run-tests.sh" in {f.path for f in task.test_files}
    assert not any(
        f.path.startswith("tests/") or f.path == "run-tests.sh" for f in task.environment_files
    )


def test_a_build_time_installer_is_recorded_and_keys_the_image():
    task = read_task_folder(FIXTURES / "tb-corpus" / "uv-build-install")
    assert task.adaptations["build_installers"] == {
        "https://astral.sh/uv/0.7.13/install.sh": {
            "tool": "uv",
            "version": "0.7.13",
            "found_in": ["install.sh"],
        }
    }
    spec = SandboxSpec.from_task(task)
    assert spec.build_installers == {
        "https://astral.sh/uv/0.7.13/install.sh": {"tool": "uv", "version": "0.7.13"}
    }
    plain = SandboxSpec.from_task(task, build_installers={})
    assert (
        spec.image_key != plain.image_key
    )  # an image built with the local installers is another image


DIGEST = "sha256:" + "0123456789abcdef" * 4


def _dockerfile_task(
    dockerfile: str, test_sh: str = "echo 1 > /logs/verifier/reward.txt\n"
) -> Task:
    return Task(
        id="t",
        instruction="x",
        environment_files=[TaskFile("Dockerfile", dockerfile.encode())],
        test_files=[TaskFile("test.sh", test_sh.encode(), 0o755)],
    )


def test_a_mirror_reference_with_a_digest_and_this_platform_builds_from_the_stand_in():
    ref = f"public.ecr.aws/docker/library/python:3.11-slim@{DIGEST}"
    task = with_adaptations(
        _dockerfile_task(f"FROM --platform=linux/amd64 {ref} AS base\nRUN true\n")
    )
    record = task.adaptations["base_images"][ref]
    assert (record["image"], record["digest"]) == ("termrl/standin:bookworm", DIGEST)
    built = next(f for f in SandboxSpec.from_task(task).build_files() if f.path == "Dockerfile")
    # The stand-in is this machine's platform: podman builds FROM it with the flag as written.
    assert built.data == b"FROM --platform=linux/amd64 termrl/standin:bookworm AS base\nRUN true\n"


def test_a_platform_that_is_not_this_machines_is_refused_at_import(tmp_path):
    from termrl.errors import TaskFormatError
    from termrl.tbcompat.runnable import unmet_requirements

    task = _dockerfile_task("FROM --platform=linux/arm64 python:3.11-slim\n")
    assert unmet_requirements(task, machine="x86_64") == [
        "FROM --platform=linux/arm64 python:3.11-slim: this machine builds linux/amd64 images "
        "only (no emulation of other platforms here)"
    ]
    assert unmet_requirements(task, machine="aarch64") == []
    if os.uname().machine != "x86_64":
        pytest.skip("the folder below asks for linux/arm64")
    [folder] = export_tasks([task], tmp_path)
    with pytest.raises(TaskFormatError, match="cannot run here: FROM --platform=linux/arm64"):
        read_task_folder(folder)


def test_an_interpreter_the_tests_ask_uv_for_and_cannot_get_is_said_plainly():
    task = _dockerfile_task(
        "FROM python:3.11-slim\n",
        "uvx --python 3.12 -w pytest==8.4.1 pytest /tests\nuv venv -p 3.11 /tmp/v\n",
    )
    notes = adaptations_for(task)["notes"]
    assert notes == [
        "the tests ask uv for Python 3.12 (test.sh), which cannot be provided offline: the sandbox "
        "has Python 3.11 only, and no Python 3.12 can be had from the registries this machine "
        "reaches; the tests will not find one"
    ]
