"""End to end: tasks in the shapes of public ones that broke offline build and score here.

- ``uv-build-install``: the Dockerfile runs install.sh, which fetches uv with
  ``curl -LsSf https://astral.sh/uv/<v>/install.sh | sh`` then runs ``uv init``,
  ``uv add pytest==…`` and ``uv pip install …`` at build time;
- ``python-on-path``: the tests run ``python`` (python:3.13 images have it);
- ``man-page``: the Dockerfile installs man-db, moves a page into
  /usr/share/man/man1/ and runs mandb; the tests run ``man``.

The oracle must pass each and doing nothing must fail each, offline (the
build reaches the package registries only), with the task folders unchanged.
"""

from __future__ import annotations

import pytest

from components.eval.config import EvalConfig
from components.eval.stage import main
from termrl.artifacts.eval_results import read_eval_results
from termrl.sandbox import SandboxSpec
from termrl.taskfolders import import_task_folders

from .conftest import CORPUS_FIXTURES
from .test_fixtures_eval import _snapshot

ALL_TASKS = ["man-page", "python-on-path", "uv-build-install"]


@pytest.mark.slow
@pytest.mark.podman
def test_oracle_passes_and_nop_fails_on_the_corpus(base_images, tmp_path):
    """Slow only: every corpus task starts from python-3-13 bookworm, whose stand-in compiles
    CPython on first use."""
    task_ids = ALL_TASKS
    before = _snapshot(CORPUS_FIXTURES)
    tasks = {t.id: t for t in import_task_folders([CORPUS_FIXTURES]).tasks}
    assert sorted(tasks) == ALL_TASKS
    assert all(SandboxSpec.from_task(t).network == "none" for t in tasks.values())
    assert "build_installers" in tasks["uv-build-install"].adaptations  # served locally, recorded

    rows = {}
    for agent in ("oracle", "nop"):
        config = EvalConfig(
            tasks=str(CORPUS_FIXTURES),
            agent=agent,
            out=str(tmp_path / f"{agent}.parquet"),
            task_ids=task_ids,
            progress=False,
        )
        main(config)
        rows[agent] = {r["task_id"]: r for r in read_eval_results(config.out).to_pylist()}
        for task_id, row in rows[agent].items():
            print(f"{agent:6} {task_id:17} passed={row['passed']} wall={row['wall_sec']:.1f}s")

    assert {t: r["passed"] for t, r in rows["oracle"].items()} == dict.fromkeys(task_ids, True), {
        t: (r["error"], (r["test_output"] or "")[-1500:])
        for t, r in rows["oracle"].items()
        if not r["passed"]
    }
    # Each nop trial reached the tests, which ran and failed (not a broken environment).
    assert {t: (r["passed"], r["failure_mode"]) for t, r in rows["nop"].items()} == dict.fromkeys(
        task_ids, (False, "wrong-result")
    ), {t: (r["error"], (r["test_output"] or "")[-1500:]) for t, r in rows["nop"].items()}
    assert _snapshot(CORPUS_FIXTURES) == before
