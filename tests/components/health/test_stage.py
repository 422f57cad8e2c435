"""The health stage on real artifacts: Parquet written with termrl's writers in, the JSON report out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from components.health.cli import health
from components.health.config import HealthConfig
from components.health.history import TRAIN_COLUMNS, IterationMetrics
from components.health.report import read_report
from components.health.stage import main
from termrl.errors import ArtifactError, ConfigError
from tests.components.health.series import healthy_run, tail_lengths, with_outcome, write_iteration


def _written(tmp_path: Path, run: list[IterationMetrics]) -> list[tuple[Path, Path]]:
    return [write_iteration(tmp_path / "run", h) for h in run]


def test_a_collapse_after_healthy_iterations_rolls_back(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = [with_outcome(h, p) for h, p in zip(healthy_run(4, seed=7), [8, 12, 11, 2], strict=True)]
    files = _written(tmp_path, run)
    first = tmp_path / "health-2.json"
    main(
        HealthConfig(
            rollout_metrics=[r for r, _ in files[:3]], train=[t for _, t in files[:3]], out=first
        )
    )

    data = json.loads(first.read_text())
    assert (data["schema"], data["iteration"], data["verdict"]) == ("termrl.health/2", 2, "healthy")
    assert data["options"] == {"train": {}, "rollout": {}} and data["next_policy"] == str(
        files[2][1]
    )
    history = data["history"]
    assert [h["policy"] for h in history] == ["start", str(files[0][1]), str(files[1][1])]
    assert [h["health"]["kind"] for h in history] == ["healthy"] * 3
    # read back from the artifacts: global and per-task rollout metrics, train steps, the options train ran
    assert (
        history[1]["rollout"]["rollout/success_rate"] == 12 / 32
        and history[1]["rollout"]["rollout/episodes"] == 32
    )
    assert sorted(history[1]["tasks"]) == [f"task-{i}" for i in range(8)]
    assert history[1]["tasks"]["task-3"] == run[1].tasks["task-3"]
    assert len(history[1]["train"]) == 8 and set(history[1]["train"][0]) == set(TRAIN_COLUMNS)
    assert history[1]["knobs"] == {
        "mode": "full",
        "learning_rate": 1e-5,
        "eps_low": 0.2,
        "eps_high": 0.2,
        "negative_weight": 1.0,
    }

    second = tmp_path / "health-3.json"
    report = main(
        HealthConfig(rollout_metrics=[files[3][0]], train=[files[3][1]], previous=first, out=second)
    )

    data = json.loads(second.read_text())
    assert data["verdict"] == "rollback" and len(data["history"]) == 4
    # the collapsed rollout ran iteration 2's checkpoint: back to iteration 1's
    assert (data["to_checkpoint"], data["to_iteration"]) == (str(files[1][1]), 1)
    assert data["next_policy"] == str(files[1][1])
    assert data["reasons"][0].startswith(
        "reward_collapse: success rate 0.06 at iteration 3, down from 0.38"
    )
    assert data["findings"][0]["severity"] == "critical"
    assert report.verdicts[-1].kind == "rollback"
    out = capsys.readouterr().out
    assert "health · iteration 3: ROLLBACK (success 6% of 32) — roll back to" in out
    assert "  reward_collapse: success rate 0.06" in out

    # judging all four at once (no previous report) replays the same verdicts
    at_once = tmp_path / "health-all.json"
    main(
        HealthConfig(
            rollout_metrics=[r for r, _ in files], train=[t for _, t in files], out=at_once
        )
    )
    assert json.loads(at_once.read_text()) == data


def test_mitigations_accumulate_and_escalate_across_health_steps(tmp_path: Path) -> None:
    run = tail_lengths(healthy_run(4, seed=5), [400, 1300, 4200, 9000], passed=[12, 13, 12, 12])
    files = _written(tmp_path, run)
    first = tmp_path / "health-2.json"
    main(
        HealthConfig(
            rollout_metrics=[r for r, _ in files[:3]],
            train=[t / "train_metrics.parquet" for _, t in files[:3]],
            out=first,
        )
    )
    data = json.loads(first.read_text())
    assert data["verdict"] == "mitigate" and data["settings"] == {
        "rollout.max_failed_response_tokens": 400
    }
    assert data["options"] == {"train": {}, "rollout": {"max_failed_response_tokens": 400}}

    second = tmp_path / "health-3.json"
    main(
        HealthConfig(rollout_metrics=[files[3][0]], train=[files[3][1]], previous=first, out=second)
    )
    data = json.loads(second.read_text())
    # the mask was in force for iteration 3 and the tail still grew (1300 → 4200 → 9000): global treatment
    assert data["history"][3]["applied"] == {"rollout.max_failed_response_tokens": 400}
    assert data["verdict"] == "mitigate" and data["settings"] == {"train.negative_weight": 0.5}
    assert data["options"] == {
        "train": {"negative_weight": 0.5},
        "rollout": {"max_failed_response_tokens": 400},
    }


def test_the_learning_rate_comes_from_the_config_when_set(tmp_path: Path) -> None:
    h = healthy_run(1)[0]
    rollout, train = write_iteration(tmp_path, h, config_lr=3e-5)
    report = main(HealthConfig(rollout_metrics=[rollout], train=[train], out=tmp_path / "h.json"))
    assert report.history[0].knobs.learning_rate == 3e-5


def test_every_problem_is_reported_before_any_work(tmp_path: Path) -> None:
    rollout, train = write_iteration(tmp_path, healthy_run(1)[0])
    (train / "training_state" / "state.json").unlink()
    config = HealthConfig(
        rollout_metrics=[rollout, tmp_path / "missing.parquet"],
        train=[train],
        previous=tmp_path / "nope.json",
        out=tmp_path / "h.json",
    )
    with pytest.raises(ConfigError) as info:
        main(config)
    assert len(info.value.problems) == 4
    assert "2 rollout metrics but 1 train outputs" in info.value.problems[0]
    assert "missing.parquet" in info.value.problems[1]
    assert "has no training_state/state.json" in info.value.problems[2]
    assert "previous health report" in info.value.problems[3]
    assert not (tmp_path / "h.json").exists()


def test_a_file_that_is_not_a_health_report_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schema": "something/1"}))
    with pytest.raises(ArtifactError, match="not a health report"):
        read_report(path)


def test_command_line(tmp_path: Path) -> None:
    files = _written(tmp_path, healthy_run(2, seed=1))
    args = [a for r, t in files for a in ("--rollout-metrics", str(r), "--train", str(t))]
    out = tmp_path / "health.json"
    result = CliRunner().invoke(
        health,
        [
            *args,
            "--out",
            str(out),
            "--set",
            "collapse_drop=0.4",
            "--set",
            "lr_factor=0.25",
            "--start-policy",
            "base",
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"verdict: healthy -> {out}" in result.output
    assert read_report(out).history[0].policy == "base"

    bad = CliRunner().invoke(
        health, [*args, "--out", str(out), "--set", "no_such_knob=1", "--set", "collapse_z=x"]
    )
    assert bad.exit_code != 0
    assert "unknown setting 'no_such_knob'" in bad.output and "collapse_z='x'" in bad.output


def test_the_report_section_shows_every_iterations_verdict_and_reasons(tmp_path: Path) -> None:
    from components.eval.report import compare_files
    from components.health.report import to_html
    from tests.components.eval.rows import sample_rows, written

    run = [with_outcome(h, p) for h, p in zip(healthy_run(4, seed=7), [8, 12, 11, 2], strict=True)]
    files = _written(tmp_path, run)
    out = tmp_path / "health.json"
    main(HealthConfig(rollout_metrics=[r for r, _ in files], train=[t for _, t in files], out=out))
    section = to_html(read_report(out))
    assert section.count("<tr>") == 5  # a header and one row per iteration
    assert section.count("<td>healthy</td>") == 3 and section.count("<td>rollback</td>") == 1
    assert "reward_collapse: success rate 0.06" in section and "data:image/png;base64," in section
    # the curriculum's comparison report carries it as its "Training health" section
    base, final = (
        written(tmp_path, sample_rows("base")),
        written(tmp_path, sample_rows("final", flip=True), "f.parquet"),
    )
    compare_files(
        tmp_path / "report.html",
        [("base", base), ("final", final)],
        sections=[("Training health", section)],
    )
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Training health</h2>" in page and section in page
