"""The click command: option mapping, config errors surfaced as one message, a real run."""

from __future__ import annotations

from click.testing import CliRunner

from components.train.cli import train
from termrl.artifacts.metrics import read_train_metrics


def test_invalid_settings_list_every_problem(toy_trajectories, tiny_model_dir, tmp_path):
    result = CliRunner().invoke(
        train,
        [
            "--trajectories",
            str(toy_trajectories),
            "--model",
            str(tiny_model_dir),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "eps_low=2",
            "--set",
            "gamma=0",
            "--set",
            "no_such_knob=1",
        ],
    )
    assert result.exit_code != 0
    assert "no_such_knob" in result.output
    result = CliRunner().invoke(
        train,
        [
            "--trajectories",
            str(toy_trajectories),
            "--model",
            str(tiny_model_dir),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "eps_low=2",
            "--set",
            "gamma=0",
        ],
    )
    assert result.exit_code != 0
    assert "eps_low=2" in result.output and "gamma=0" in result.output


def test_config_file_and_options(toy_trajectories, tiny_model_dir, tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(
        "mode: full\nobjective: token\nnormalisation: sequence\nlearning_rate: 0.001\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        train,
        [
            "--trajectories",
            str(toy_trajectories),
            "--model",
            str(tiny_model_dir),
            "--out",
            str(out),
            "--config",
            str(config),
            "--max-steps",
            "2",
            "--finetune",
            "full",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "trained 2 step(s)" in result.output
    rows = read_train_metrics(out / "train_metrics.parquet").to_pylist()
    assert [r["objective"] for r in rows] == ["token", "token"]
    assert all(r["mode"] == "full" for r in rows)


def test_imitation_options_reach_the_config(toy_trajectories, tiny_model_dir, tmp_path):
    # validation runs before any model work, so bad values come back at once, all of them
    result = CliRunner().invoke(
        train,
        [
            "--trajectories",
            str(toy_trajectories),
            "--model",
            str(tiny_model_dir),
            "--out",
            str(tmp_path / "o"),
            "--rl-weight",
            "-1",
            "--il-weight",
            "2",
            "--il-decay",
            "0",
            "--iteration",
            "-2",
            "--demonstrations",
            str(toy_trajectories),
        ],
    )
    assert result.exit_code != 0
    assert (
        "rl_weight=-1.0" in result.output
        and "il_decay=0.0" in result.output
        and "iteration=-2" in result.output
    )
    assert "il_weight" not in result.output
