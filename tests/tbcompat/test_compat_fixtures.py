"""Harbor tasks in the shapes others write them (tests/fixtures/harbor-compat), imported and scored.

Each pattern has its folder: a Dockerfile per registry-mirror form of the
official images (one with a digest and ``--platform``), ``python:3.12`` with a
pin whose wheels stop at 3.12, a test script running ``uvx --python 3.12``, a
multi-step task with step keys termrl does not know, a test that leaves a
thread running, a ``python:3.13-slim-bookworm`` task whose solution parses
bookworm's OpenSSL 3.0 output (``CN = a.b``) and whose tests run ``uvx --python
3.13``, and (in harbor-compat-refused) a task asking for a GPU. The oracle must
pass and doing nothing must fail, offline, through the eval stage.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from components.eval.config import EvalConfig
from components.eval.stage import main
from termrl.artifacts.eval_results import read_eval_results
from termrl.artifacts.tasks import save_tasks
from termrl.taskfolders import import_task_folders, read_task_folder
from termrl.taskfolders.cli import tasks as tasks_cli
from termrl.tbcompat.standins import DOCKER_HUB_OFFICIAL, PYTHON313_BOOKWORM, PYTHON_BOOKWORM
from termrl.tbcompat.testphase import EXIT_GRACE_SEC

FIXTURES = Path(__file__).parents[1] / "fixtures"
COMPAT = FIXTURES / "harbor-compat"
REFUSED = FIXTURES / "harbor-compat-refused"
MIRRORS = [
    "mirror-docker-io-implicit",
    "mirror-docker-io-library",
    "mirror-ecr-digest",
    "mirror-gcr",
    "mirror-index-docker-io",
    "mirror-registry-1",
]
RUNNABLE = [
    *MIRRORS,
    "multi-step-keys",
    "openssl-bookworm",  # its first run compiles CPython 3.13 for the stand-in (minutes, once)
    "python312-pin",
    "thread-left-running",
]
CI_TASKS = ["mirror-ecr-digest", "multi-step-keys"]  # the grace period: test_exit_grace.py
GPU_TASK = "gpu-task"


def test_every_mirror_form_has_a_fixture_and_all_resolve_to_one_stand_in():
    tasks = {t.id: t for t in import_task_folders([COMPAT]).tasks}
    refs = {}
    for task_id in MIRRORS:
        [(ref, record)] = tasks[task_id].adaptations["base_images"].items()
        assert record["image"] == PYTHON_BOOKWORM
        refs[task_id] = ref
    for prefix in DOCKER_HUB_OFFICIAL:  # a fixture per form in the one list of mirrors
        assert any(ref.startswith(prefix) for ref in refs.values()), prefix
    assert refs["mirror-docker-io-implicit"] == "docker.io/python:3.11-slim"
    digest = tasks["mirror-ecr-digest"].adaptations["base_images"][refs["mirror-ecr-digest"]]
    assert digest["digest"].startswith("sha256:")


def test_what_python_3_12_tasks_get_is_said_plainly_at_import():
    pin = read_task_folder(COMPAT / "python312-pin")
    assert pin.adaptations["notes"] == [
        "FROM python:3.12-slim: Python 3.11 (Debian bookworm's python3) instead of Python 3.12: no "
        "Python 3.12 can be had offline here: Debian's archive has no python3.12 in any suite, "
        "packaged or as source, and PyPI and npm carry only installers that download CPython "
        "from elsewhere; code or pins that need exactly 3.12 may fail"
    ]
    uvx = read_task_folder(COMPAT / "uvx-python-312")
    assert uvx.adaptations["notes"][1] == (
        "the tests ask uv for Python 3.12 (test.sh), which cannot be provided offline: the "
        "sandbox has Python 3.11 only, and no Python 3.12 can be had from the registries this "
        "machine reaches; the tests will not find one"
    )


def test_a_tag_naming_bookworm_gets_bookworm_with_the_python_it_names():
    task = read_task_folder(COMPAT / "openssl-bookworm")
    [record] = task.adaptations["base_images"].values()
    assert record["image"] == PYTHON313_BOOKWORM
    kit = task.adaptations["test_kit"]
    assert (kit["python"], kit["glibc"]) == ("3.13", "2.36")  # uvx --python 3.13 finds it
    assert "notes" not in task.adaptations  # nothing differs that a note must say


def test_import_prints_warnings_and_notes_and_skips_the_gpu_task_only_when_asked(tmp_path):
    runner = CliRunner()
    out = tmp_path / "tasks.parquet"
    refused = runner.invoke(tasks_cli, ["import", str(COMPAT), str(REFUSED), "--out", str(out)])
    assert refused.exit_code == 1 and not out.exists()
    assert (
        f"invalid task: {REFUSED / GPU_TASK}: cannot run here: [environment].gpus = 1: termrl's "
        "sandboxes get no GPU" in refused.output
    )
    skipped = runner.invoke(
        tasks_cli, ["import", str(COMPAT), str(REFUSED), "--skip-invalid", "--out", str(out)]
    )
    assert skipped.exit_code == 0, skipped.output
    assert "imported 11 task(s) (11 harbor); skipped 1 invalid" in skipped.output
    assert (
        f"warning: {COMPAT / 'multi-step-keys'}: step 'second': title is not a key termrl knows"
        in skipped.output
    )
    assert "note: uvx-python-312: the tests ask uv for Python 3.12" in skipped.output


def _gpu_task():
    """A task asking for a GPU, as a tasks artifact made elsewhere carries it (import here refuses
    the gpu-task folder): the gpu-task fixture's instruction, solution and tests, ``gpus = 1``."""
    task = read_task_folder(COMPAT / "mirror-gcr")
    return dataclasses.replace(
        task, id=GPU_TASK, metadata={**task.metadata, "environment": {"gpus": 1}}
    )


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.parametrize(
    "task_ids",
    [pytest.param(CI_TASKS, marks=pytest.mark.ci, id="ci"), pytest.param(RUNNABLE, id="all")],
)
def test_oracle_passes_nop_fails_and_the_gpu_task_is_refused(task_ids, base_images, tmp_path):
    before = _snapshot(COMPAT)
    tasks = [t for t in import_task_folders([COMPAT]).tasks if t.id in task_ids]
    assert sorted(t.id for t in tasks) == sorted(task_ids)
    artifact = tmp_path / "tasks.parquet"
    save_tasks(artifact, [*tasks, _gpu_task()])
    rows = {}
    for agent in ("oracle", "nop"):
        config = EvalConfig(
            tasks=str(artifact), agent=agent, out=str(tmp_path / f"{agent}.parquet"), progress=False
        )
        main(config)
        rows[agent] = {r["task_id"]: r for r in read_eval_results(config.out).to_pylist()}
        for row in rows[agent].values():
            print(agent, row["task_id"], row["passed"], row["test_sec"], row["wall_sec"])
    for agent in ("oracle", "nop"):
        gpu = rows[agent].pop(GPU_TASK)
        assert (gpu["passed"], gpu["failure_mode"]) == (False, "environment-error")
        assert "cannot run here: [environment].gpus = 1" in gpu["error"], gpu["error"]
    oracle, nop = rows["oracle"], rows["nop"]
    assert {t: r["passed"] for t, r in oracle.items()} == dict.fromkeys(task_ids, True), {
        t: (r["error"], (r["test_output"] or "")[-1500:])
        for t, r in oracle.items()
        if not r["passed"]
    }
    assert {t: (r["passed"], r["failure_mode"]) for t, r in nop.items()} == dict.fromkeys(
        task_ids, (False, "wrong-result")
    )
    # The forgotten thread no longer holds scoring until the verifier's 600 s timeout (the full
    # set; the default run checks the grace period in test_exit_grace.py).
    for agent in ("oracle", "nop") if "thread-left-running" in task_ids else ():
        thread = rows[agent]["thread-left-running"]
        assert "ending it with pytest's exit status" in thread["test_output"]
        assert thread["test_sec"] < EXIT_GRACE_SEC + 240, thread["test_sec"]
    assert _snapshot(COMPAT) == before
