"""``KEY=VALUE`` settings, typed: the one parser behind every ``--set``.

    parse_settings(TrainConfig, ["eps_high=0.28", "resume=yes"])  -> {"eps_high": 0.28, "resume": True}
    parse_settings({"synth_count": 48}, ["synth_count=24"])        -> {"synth_count": 24}

Stage options also travel as JSON (a kfp ``dict`` parameter, a rerun's
options): ``jsonable`` writes them, ``build_config`` types them back and
builds the stage's config, the options winning over the component's own
parameters. A stage command's ``--config FILE`` (YAML or JSON) is read by
``read_settings_file``; every stage command layers its sources the same way:

    the config's defaults < --config FILE < options given on the command line < --set KEY=VALUE

(``given_options`` tells an option the user typed from a click default).

A setting is typed by the target: a dataclass's field annotations, or a
mapping's default values (a kfp pipeline's parameters). Unknown keys and
values that do not fit are errors, all reported at once: a misspelt knob must
never be silently ignored. Values that are neither numbers, booleans, strings
nor paths (lists, tuples, dicts) are read as YAML flow values
(``"[1, 2]"``, ``"{a: 1}"``).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import UnionType
from typing import Any

import click
import yaml
from click.core import ParameterSource

from termrl.errors import ConfigError

__all__ = [
    "build_config",
    "coerce_value",
    "config_file_option",
    "field_types",
    "given_options",
    "jsonable",
    "parse_settings",
    "parse_typed",
    "read_settings_file",
    "split_item",
]

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def field_types(target: type | Mapping[str, Any]) -> dict[str, Any]:
    """Each known key's type: a dataclass's annotations, or the type of each default."""
    if isinstance(target, Mapping):
        return {key: (Any if value is None else type(value)) for key, value in target.items()}
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        return {f.name: hints[f.name] for f in dataclasses.fields(target)}
    raise TypeError(f"settings target must be a dataclass or a mapping, not {target!r}")


def split_item(item: str) -> tuple[str, str]:
    """``"KEY=VALUE"`` -> ``("KEY", "VALUE")`` (the key stripped; the value kept as written)."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{item!r} is not KEY=VALUE")
    return key.strip(), text


def _alternatives(kind: Any) -> set[Any]:
    """The members of a union (``int | None`` -> {int, None}); any other type alone."""
    if typing.get_origin(kind) in (typing.Union, UnionType):
        return set(typing.get_args(kind))
    return {kind}


def coerce_value(name: str, text: str, kind: Any) -> Any:
    """``text`` as a value of ``kind`` (a type or a typing hint such as ``int | None``)."""
    import yaml

    options = _alternatives(kind)
    origin_options = {typing.get_origin(o) or o for o in options}
    stripped = text.strip()
    if stripped.lower() in ("none", "null") and (type(None) in options or kind is Any):
        return None
    try:
        if bool in origin_options:
            if stripped.lower() not in _TRUE + _FALSE:
                raise ValueError("not a boolean (true/false, yes/no, 1/0)")
            return stripped.lower() in _TRUE
        if int in origin_options and float not in origin_options:
            number = float(stripped)
            if not number.is_integer():
                raise ValueError("not a whole number")
            return int(number)
        if float in origin_options:
            return float(stripped)
        if Path in origin_options:
            return Path(stripped)
        if str in origin_options:
            return text
        value = yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{name}={text!r}: {exc}") from exc
    if tuple in origin_options and isinstance(value, list):
        return tuple(value)
    return value


def parse_settings(target: type | Mapping[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items -> ``{key: typed value}`` for ``target``'s keys (later items win)."""
    return parse_typed(field_types(target), items)


def parse_typed(types: Mapping[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items -> ``{key: typed value}``, with each known key's type given."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for item in items:
        try:
            key, text = split_item(item)
            if key not in types:
                raise ConfigError(f"unknown setting {key!r}; known: {', '.join(sorted(types))}")
            values[key] = coerce_value(key, text, types[key])
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return values


def jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as JSON values (paths as strings, tuples as lists), for a kfp parameter."""

    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {key: plain(value) for key, value in values.items()}


def _from_json(name: str, value: Any, kind: Any) -> Any:
    if isinstance(value, str):
        return coerce_value(name, value, kind)
    if isinstance(value, Mapping) and isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return build_config(kind, {}, value)  # a nested config (``agent: {prompt_style: hermes}``)
    options = {typing.get_origin(o) or o for o in _alternatives(kind)}
    if isinstance(value, list) and tuple in options:
        return tuple(value)
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and float in options
        and int not in options
    ):
        return float(value)
    return value


def _typed(config_class: type, values: Mapping[str, Any], source: str = "") -> dict[str, Any]:
    """JSON-like ``values`` typed by ``config_class``'s fields; unknown keys refused, all at once.
    ``source``: the file they came from (else they are kfp or rerun options)."""
    types = field_types(config_class)
    where, noun = (f"{source}: ", "field") if source else ("", "option")
    problems = [
        f"{where}unknown {config_class.__name__} {noun} {k!r}"
        for k in sorted(set(values) - set(types))
    ]
    typed: dict[str, Any] = {}
    for key in sorted(set(values) & set(types)):
        try:
            typed[key] = _from_json(key, values[key], types[key])
        except ConfigError as exc:
            problems.extend(f"{where}{p}" for p in exc.problems)
    if problems:
        raise ConfigError(problems)
    return typed


def build_config(
    config_class: type, explicit: Mapping[str, Any], options: Mapping[str, Any] | None
) -> Any:
    """``config_class(**explicit)`` with ``options`` (JSON values, unknown keys refused) on top."""
    return config_class(**{**explicit, **_typed(config_class, dict(options or {}))})


def read_settings_file(config_class: type, path: str | Path | None) -> dict[str, Any]:
    """The fields set in the YAML or JSON file at ``path`` (None: none), typed by ``config_class``."""
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
        loaded = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if loaded is None:  # an empty file sets nothing
        return {}
    if not isinstance(loaded, Mapping):
        raise ConfigError(
            f"config file {path} must hold a mapping of {config_class.__name__} fields"
        )
    return _typed(config_class, loaded, str(path))


def config_file_option(config_class: type) -> Any:
    """The ``--config FILE`` option of a stage command whose config is ``config_class``."""
    return click.option(
        "--config",
        "config_file",
        type=click.Path(exists=True, dir_okay=False),
        default=None,
        help=f"YAML or JSON file of {config_class.__name__} fields. Precedence: defaults < this file "
        "< the options given here < --set.",
    )


def given_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``options`` of the running click command that the user gave (command line or
    environment), leaving out the ones that hold click's default: those must not override
    a ``--config`` file."""
    ctx = click.get_current_context()
    defaulted = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    return {
        key: value
        for key, value in options.items()
        if ctx.get_parameter_source(key) not in defaulted
    }
