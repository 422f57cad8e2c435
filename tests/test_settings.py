"""termrl.settings: the one KEY=VALUE parser, and stage options travelling as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.rollout.config import RolloutConfig
from components.train.config import TrainConfig
from termrl.errors import ConfigError
from termrl.settings import build_config, jsonable, parse_settings


@dataclass
class Knobs:
    steps: int | None = None
    rate: float = 0.1
    flag: bool = False
    name: str = "x"
    folder: Path = Path("out")
    pair: tuple[float, float] = (0.9, 0.99)
    modules: list[str] | str = "all-linear"
    extra: dict = field(default_factory=dict)


def test_values_take_their_fields_types():
    values = parse_settings(
        Knobs,
        [
            "steps=3",
            "rate=1e-5",
            "flag=yes",
            "name=007",
            "folder=/tmp/a",
            "pair=[0.8, 0.95]",
            "modules=q_proj",
            "extra={a: 1}",
        ],
    )
    assert values == {
        "steps": 3,
        "rate": 1e-5,
        "flag": True,
        "name": "007",
        "folder": Path("/tmp/a"),
        "pair": (0.8, 0.95),
        "modules": "q_proj",
        "extra": {"a": 1},
    }
    assert parse_settings(Knobs, ["steps=null"]) == {"steps": None}
    assert parse_settings(Knobs, ["steps=4.0", "steps=5"]) == {"steps": 5}  # the later item wins


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as error:
        parse_settings(
            Knobs, ["stpes=3", "steps=2.5", "flag=maybe", "rate=fast", "name", "=1", "rate=null"]
        )
    problems = error.value.problems
    assert len(problems) == 7, problems
    assert problems[0].startswith("unknown setting 'stpes'; known: extra, flag, folder")
    assert "steps='2.5': not a whole number" in problems[1]
    assert "'name' is not KEY=VALUE" in problems[4]


def test_a_mapping_of_defaults_types_its_keys():
    defaults = {"count": 12, "lr": 0.0, "model": "", "on": True, "options": {}}
    assert parse_settings(
        defaults, ["count=4", "lr=3", "model=/m", "on=off", "options={k: v}"]
    ) == {"count": 4, "lr": 3.0, "model": "/m", "on": False, "options": {"k": "v"}}


def test_stage_options_survive_json_and_win_over_the_components_own_values():
    options = json.loads(
        json.dumps(
            jsonable(
                parse_settings(
                    RolloutConfig,
                    [
                        "demonstrations=/tmp/demos.parquet",
                        "cli_agent_command=[agent, --fast]",
                        "groups=6",
                    ],
                )
            )
        )
    )
    config = build_config(RolloutConfig, {"groups": 2, "group_size": 8}, options)
    assert config.demonstrations == Path("/tmp/demos.parquet") and config.cli_agent_command == (
        "agent",
        "--fast",
    )
    assert (config.groups, config.group_size) == (6, 8)
    # a UI user may type a number as text; an int where a float belongs stays a float
    config = build_config(
        TrainConfig,
        {"trajectories": "t.parquet", "out": "o"},
        {"negative_weight": "0.5", "eps_high": 1, "adam_betas": [0.8, 0.9]},
    )
    assert config.negative_weight == 0.5 and isinstance(config.eps_high, float)
    assert config.adam_betas == (0.8, 0.9)
    with pytest.raises(ConfigError, match="unknown TrainConfig option 'negative_wieght'"):
        build_config(TrainConfig, {}, {"negative_wieght": 0.5})


def test_a_settings_file_is_typed_by_the_config_and_may_nest_configs(tmp_path):
    from components.demonstrate.config import DemonstrateConfig
    from termrl.settings import read_settings_file

    path = tmp_path / "c.yaml"
    path.write_text("concurrency: '3'\nagent: {prompt_style: hermes, max_turns: 5}\n")
    values = read_settings_file(DemonstrateConfig, path)
    assert values["concurrency"] == 3
    assert values["agent"].prompt_style == "hermes" and values["agent"].max_turns == 5
    (tmp_path / "empty.yaml").write_text("")
    assert read_settings_file(DemonstrateConfig, tmp_path / "empty.yaml") == {}
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a mapping of DemonstrateConfig fields"):
        read_settings_file(DemonstrateConfig, tmp_path / "list.json")
    (tmp_path / "bad.yaml").write_text("agent: {prompt_stile: x}\nconcurrency: many\n")
    with pytest.raises(ConfigError) as info:
        read_settings_file(DemonstrateConfig, tmp_path / "bad.yaml")
    assert len(info.value.problems) == 2  # every problem at once, nested ones included


def test_stage_options_are_generated_from_the_fields_and_layered_once(tmp_path):
    """defaults < --config < options given < --set, through the one helper every command uses."""
    import click
    from click.testing import CliRunner

    from termrl.settings import config_options, resolve_config, stage_command_options

    seen = {}

    @click.command()
    @config_options(Knobs, "steps", "rate", "flag", "modules", aliases={"rate": "--lr"})
    @stage_command_options(Knobs)
    def command(config_file, settings, **options):
        seen["config"] = resolve_config(Knobs, config_file, options, settings)

    (tmp_path / "k.yaml").write_text("rate: 0.5\nsteps: 7\n")
    help_text = CliRunner().invoke(command, ["--help"]).output
    assert "Default: 0.1." in help_text and "--flag / --no-flag" in help_text
    result = CliRunner().invoke(
        command,
        [
            "--config",
            str(tmp_path / "k.yaml"),
            "--lr",
            "0.25",
            "--modules",
            "q,k",
            "--set",
            "steps=9",
        ],
    )
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.rate, config.steps, config.modules, config.flag) == (0.25, 9, ["q", "k"], False)
    CliRunner().invoke(command, ["--config", str(tmp_path / "k.yaml")])
    assert (seen["config"].rate, seen["config"].steps) == (0.5, 7)  # unset options: the file's


def test_unset_values_leave_the_config_default():
    assert build_config(Knobs, {"steps": None, "rate": None, "name": "y"}, None) == Knobs(name="y")


def test_whole_numbers_kfp_turned_into_doubles_are_integers_again():
    """kfp carries a dict parameter (``rollout_options``) as a protobuf Struct, whose numbers are
    doubles: ``{"redundancy": 0}`` arrives as ``0.0``, which ``range()`` refuses."""
    config = build_config(RolloutConfig, {}, {"redundancy": 0.0, "groups": 6.0, "temperature": 1})
    assert config.redundancy == 0 and type(config.redundancy) is int
    assert config.groups == 6 and type(config.groups) is int
    assert type(config.temperature) is float  # and an int where a float belongs stays a float
    train = build_config(TrainConfig, {"trajectories": "t", "out": "o"}, {"max_steps": 1.0})
    assert type(train.max_steps) is int  # int | None
    with pytest.raises(ConfigError, match="groups must be an integer, not 2.5"):
        build_config(RolloutConfig, {}, {"groups": 2.5})
