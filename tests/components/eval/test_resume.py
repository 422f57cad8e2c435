"""Nothing finished is lost: an eval stopped part-way resumes, a changed config starts over.

The trials run in real podman sandboxes (the nop and oracle agents: no model
needed to exercise the bookkeeping); the parts are real Parquet files.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from components.eval.config import EvalConfig
from components.eval.resume import TrialParts, fingerprint, resume_trials
from components.eval.stage import main
from components.eval.trials import load_eval_tasks
from termrl.artifacts.eval_results import read_eval_results

from .rows import make_row

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"
QUICK = ["hello-file", "reverse-words"]


class Stop(Exception):
    """What a crash looks like from inside the eval."""


def _config(tmp_path: Path, **changes) -> EvalConfig:
    return EvalConfig(
        tasks=str(FIXTURES),
        task_ids=QUICK,
        agent="nop",
        trials=2,
        concurrency=1,
        out=str(tmp_path / "results.parquet"),
        progress=False,
        **changes,
    )


def _crash_after(config: EvalConfig, rows: int) -> list[dict]:
    """Run the eval and stop it by raising from ``on_row`` once ``rows`` trials finished."""
    tasks = load_eval_tasks(config)
    parts = TrialParts(config.parts_dir(), fingerprint(config, tasks))
    seen: list[tuple[str, int]] = []

    def stop(row: dict) -> None:
        seen.append((row["task_id"], row["trial"]))
        if len(seen) == rows:
            raise Stop

    with pytest.raises(ExceptionGroup) as caught:
        asyncio.run(resume_trials(config, tasks, parts, on_row=stop))
    assert caught.group_contains(Stop)
    return parts.load()


def test_parts_round_trip_and_start_over_on_another_config(tmp_path: Path, capsys) -> None:
    config = _config(tmp_path)
    tasks = load_eval_tasks(config)
    parts = TrialParts(config.parts_dir(), fingerprint(config, tasks))
    row = make_row("hello/file", 1, True, test_output="ok", tests_passed=True)
    parts.write(row)
    parts.write(make_row("hello/file", 0, False))
    (config.parts_dir() / "broken.parquet").write_bytes(
        b"not parquet"
    )  # a disk fault: run it again
    loaded = sorted(parts.load(), key=lambda r: r["trial"])
    assert [r["trial"] for r in loaded] == [0, 1] and loaded[1]["test_output"] == "ok"
    assert not (config.parts_dir() / "broken.parquet").exists()
    # the same config finds its parts; another one removes them and says so
    assert len(TrialParts(config.parts_dir(), fingerprint(config, tasks)).load()) == 2
    assert capsys.readouterr().err == ""
    greedy_off = dataclasses.replace(config, temperature=0.7)
    assert TrialParts(config.parts_dir(), fingerprint(greedy_off, tasks)).load() == []
    assert "differs in: temperature" in capsys.readouterr().err
    # the trial count is not part of the fingerprint: trial t is the same trial
    assert fingerprint(dataclasses.replace(config, trials=5), tasks) == fingerprint(config, tasks)
    assert fingerprint(config, tasks[:1]) != fingerprint(config, tasks)
    # merge writes the artifact and drops the sidecar
    parts = TrialParts(config.parts_dir(), fingerprint(config, tasks))
    parts.merge([row], config.out)
    assert read_eval_results(config.out).to_pylist()[0]["task_id"] == "hello/file"
    assert not config.parts_dir().exists()


@pytest.mark.podman
def test_a_stopped_eval_resumes_without_rerunning_finished_trials(tmp_path: Path) -> None:
    config = _config(tmp_path)
    kept = _crash_after(config, rows=2)
    # The rows that finished before the stop are on disk (a trial that ended in the same
    # instant may be too); the cancelled ones are not.
    finished = {(r["task_id"], r["trial"]): r for r in kept}
    assert 2 <= len(finished) < 4
    assert not Path(config.out).exists()

    tasks = load_eval_tasks(config)
    parts = TrialParts(config.parts_dir(), fingerprint(config, tasks))
    ran: list[tuple[str, int]] = []
    rows = asyncio.run(
        resume_trials(config, tasks, parts, on_row=lambda r: ran.append((r["task_id"], r["trial"])))
    )
    parts.merge(rows, config.out)

    every = {(t, trial) for t in QUICK for trial in range(2)}
    assert set(ran) == every - set(finished)  # only the missing trials ran
    final = read_eval_results(config.out).to_pylist()
    assert sorted((r["task_id"], r["trial"]) for r in final) == sorted(every)
    for row in final:  # the finished rows are the ones written before the stop, unchanged
        if (row["task_id"], row["trial"]) in finished:
            assert row == finished[(row["task_id"], row["trial"])]
    assert not any(r["passed"] for r in final) and not config.parts_dir().exists()


@pytest.mark.podman
def test_the_stage_resumes_and_a_changed_config_starts_over(tmp_path: Path, capsys) -> None:
    config = _config(tmp_path)
    finished = {(r["task_id"], r["trial"]): r for r in _crash_after(config, rows=1)}

    summary = main(config)
    final = read_eval_results(config.out).to_pylist()
    assert summary["trials"] == len(final) == 4
    assert all(
        row == finished[key] for row in final if (key := (row["task_id"], row["trial"])) in finished
    )

    # Stopped again, then rerun as another agent on the same output: no nop row survives.
    _crash_after(config, rows=1)
    capsys.readouterr()
    oracle = dataclasses.replace(config, agent="oracle")
    main(oracle)
    assert "starting over" in capsys.readouterr().err
    final = read_eval_results(config.out).to_pylist()
    assert (
        len(final) == 4
        and {r["agent"] for r in final} == {"oracle"}
        and all(r["passed"] for r in final)
    )
