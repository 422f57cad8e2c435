"""``KEY=VALUE`` settings, typed: the one parser behind every ``--set``.

    parse_settings(TrainConfig, ["eps_high=0.28", "resume=yes"])  -> {"eps_high": 0.28, "resume": True}
    parse_settings({"synth_count": 48}, ["synth_count=24"])        -> {"synth_count": 24}

Stage options also travel as JSON (a kfp ``dict`` parameter, a rerun's
options): ``jsonable`` writes them, ``build_config`` types them back and
builds the stage's config, the options winning over the component's own
parameters. A stage command's ``--config FILE`` (YAML or JSON) is read by
``read_settings_file``; every stage command layers its sources the same way, in
``resolve_config``:

    the config's defaults < --config FILE < options given on the command line < --set KEY=VALUE

A stage command's options are generated from its config's fields (``config_options``):
typed by the field, described by its docstring, defaulting to None (unset), so the
config is the one place a default lives. A field whose type is shown flat
(``SandboxSettings``: ``sandbox_backend``, ``sandbox_namespace``, ...) is set by its flat
keys everywhere (``flat_keys``, ``fold_flat``).

A setting is typed by the target: a dataclass's field annotations, or a
mapping's default values (a kfp pipeline's parameters). Unknown keys and
values that do not fit are errors, all reported at once: a misspelt knob must
never be silently ignored. Values that are neither numbers, booleans, strings
nor paths (lists, tuples, dicts) are read as YAML flow values
(``"[1, 2]"``, ``"{a: 1}"``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import UnionType
from typing import Any

import click
import yaml

from termrl.errors import ConfigError

__all__ = [
    "build_config",
    "coerce_value",
    "config_file_option",
    "config_options",
    "field_defaults",
    "field_docs",
    "field_types",
    "flat_keys",
    "fold_flat",
    "jsonable",
    "parse_settings",
    "parse_typed",
    "read_settings_file",
    "resolve_config",
    "split_item",
    "stage_command_options",
    "unset_removed",
]

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def field_types(target: type | Mapping[str, Any]) -> dict[str, Any]:
    """Each known key's type: a dataclass's annotations (and the flat keys of its flattened
    fields, ``flat_keys``), or the type of each default."""
    if isinstance(target, Mapping):
        return {key: (Any if value is None else type(value)) for key, value in target.items()}
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        types = {f.name: hints[f.name] for f in dataclasses.fields(target)}
        return {**types, **{key: kind for key, (_, kind) in flat_keys(target).items()}}
    raise TypeError(f"settings target must be a dataclass or a mapping, not {target!r}")


def flat_keys(config_class: type) -> dict[str, tuple[str, Any]]:
    """Flat key -> (the field it belongs to, its type), for the fields of ``config_class`` whose
    type is shown flat (it has ``flat_types()`` and ``from_flat()``, as ``SandboxSettings``:
    ``sandbox_backend`` sets ``config.sandbox.backend``)."""
    if not dataclasses.is_dataclass(config_class):
        return {}
    hints = typing.get_type_hints(config_class)
    keys: dict[str, tuple[str, Any]] = {}
    for f in dataclasses.fields(config_class):
        kind = hints[f.name]
        if isinstance(kind, type) and hasattr(kind, "flat_types"):
            keys.update({key: (f.name, t) for key, t in kind.flat_types().items()})
    return keys


def fold_flat(config_class: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with their flat keys folded into the fields they belong to, on top of a value
    given for that field itself (``{"sandbox": ..., "sandbox_backend": "bwrap"}``)."""
    groups = flat_keys(config_class)
    folded = {key: value for key, value in values.items() if key not in groups}
    hints = typing.get_type_hints(config_class) if groups else {}
    for key, (name, _) in groups.items():
        if key in values:
            folded[name] = hints[name].from_flat({key: values[key]}, base=folded.get(name))
    return folded


def unset_removed(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the None ones: a component parameter or an option left unset, which
    leaves the config's default in place (the config is the one place a default lives)."""
    return {key: value for key, value in values.items() if value is not None}


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
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return plain(dataclasses.asdict(value))
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
    if isinstance(value, float) and int in options and float not in options:
        # kfp hands a dict parameter over as a protobuf Struct, whose numbers are all doubles.
        if not value.is_integer():
            raise ConfigError(f"{name} must be an integer, not {value}")
        return int(value)
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
    """``config_class(**explicit)`` with ``options`` (JSON values, unknown keys refused) on top.
    None in ``explicit`` is unset (the config's default stays); flat keys are folded."""
    values = {**unset_removed(explicit), **_typed(config_class, dict(options or {}))}
    return config_class(**fold_flat(config_class, values))


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


# --- stage commands: options generated from a config's fields --------------------------------


def field_docs(config_class: type) -> dict[str, str]:
    """Each field's docstring (the string under it in the class body), whitespace folded;
    flattened fields' keys with their own docs (``flat_docs()``)."""
    docs: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        if isinstance(hints[f.name], type) and hasattr(hints[f.name], "flat_docs"):
            docs.update(hints[f.name].flat_docs())
    return docs


def field_defaults(config_class: type) -> dict[str, Any]:
    """Each field's default (and each flat key's), from one default instance."""
    instance = config_class()
    values = {f.name: getattr(instance, f.name) for f in dataclasses.fields(config_class)}
    for key, (name, _) in flat_keys(config_class).items():
        values[key] = values[name].to_flat()[key]
    return values


def _first_sentence(text: str) -> str:
    head = text.split(". ")[0].rstrip(".")
    return head + "."


def _click_type(kind: Any) -> tuple[Any, type | None]:
    """(click type, container of many values or None) of a field type: ``int | None`` ->
    (int, None); ``tuple[str, ...]`` -> (str, tuple); ``list[str] | str`` -> (str, list)."""
    options = {typing.get_origin(o) or o for o in _alternatives(kind)} - {type(None)}
    for container in (list, tuple):
        if container in options:
            return str, container
    for simple in (bool, int, float, Path, str):
        if simple in options:
            return (click.Path(path_type=Path) if simple is Path else simple), None
    return str, None


def _many(container: type) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """Repeated or comma-separated values (``--x a --x b``, ``--x a,b``); not given: None;
    given empty (``--x ""``): an empty list."""

    def convert(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
        if not values:
            return None
        return container(v.strip() for value in values for v in value.split(",") if v.strip())

    return convert


def _flat_cli(config_class: type) -> dict[str, dict[str, Any]]:
    """Command-line extras (``aliases``, ``choices``) of the flat keys of ``config_class``'s
    flattened fields, as their type declares them (``flat_cli()``)."""
    hints = typing.get_type_hints(config_class)
    extras: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(config_class):
        if isinstance(hints[f.name], type) and hasattr(hints[f.name], "flat_cli"):
            extras.update(hints[f.name].flat_cli())
    return extras


def config_options(
    config_class: type,
    *names: str,
    required: Iterable[str] = (),
    aliases: Mapping[str, str | tuple[str, ...]] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[Any], Any]:
    """Click options for the fields ``names`` of ``config_class``: ``--field-name`` (plus
    ``aliases``), typed by the field, helped by its docstring and its default. Every option
    defaults to None (unset), so the config is the one place a default lives; ``resolve_config``
    layers them. ``overrides``: extra click keywords per field (a ``Choice``, ``exists=True``).
    A flat key takes the aliases and choices its type declares (``--backend`` for
    ``--sandbox-backend``, one of the registered backends)."""
    types, docs, defaults = (
        field_types(config_class),
        field_docs(config_class),
        field_defaults(config_class),
    )
    needed = set(required)
    flat = _flat_cli(config_class)

    def decorate(command: Any) -> Any:
        for name in reversed(names):
            kind, many = _click_type(types[name])
            if "choices" in flat.get(name, {}):
                kind = click.Choice(flat[name]["choices"])
            decls = [f"--{name.replace('_', '-')}"]
            extra = (aliases or {}).get(name, flat.get(name, {}).get("aliases", ()))
            decls += [extra] if isinstance(extra, str) else list(extra)
            help_text = _first_sentence(docs.get(name, name))
            kwargs: dict[str, Any] = {"default": None, "required": name in needed}
            if name not in needed:
                help_text += f" Default: {defaults[name]!r}."
            if kind is bool:
                decls = [f"{decls[0]}/--no-{decls[0][2:]}", *decls[1:]]
            elif many is not None:
                kwargs |= {"multiple": True, "callback": _many(many), "default": ()}
                kwargs["metavar"] = "VALUE[,VALUE]"
            else:
                kwargs["type"] = kind
            kwargs = {"help": help_text, **kwargs, **(overrides or {}).get(name, {})}
            command = click.option(*decls, name, **kwargs)(command)
        return command

    return decorate


def stage_command_options(config_class: type) -> Callable[[Any], Any]:
    """``--config FILE`` and ``--set KEY=VALUE`` of a stage command (``resolve_config`` reads them)."""

    def decorate(command: Any) -> Any:
        command = click.option(
            "--set",
            "settings",
            multiple=True,
            metavar="KEY=VALUE",
            help=f"Set any {config_class.__name__} field (repeatable); wins over the options above.",
        )(command)
        return config_file_option(config_class)(command)

    return decorate


def resolve_config(
    config_class: type,
    config_file: str | Path | None,
    options: Mapping[str, Any],
    settings: Iterable[str] = (),
) -> Any:
    """The stage's config, layered: its defaults < ``--config FILE`` < the options given
    (None: not given) < ``--set KEY=VALUE``. Flat keys (``sandbox_backend``) are folded."""
    values = {
        **read_settings_file(config_class, config_file),
        **unset_removed(options),
        **parse_settings(config_class, settings),
    }
    return config_class(**fold_flat(config_class, values))
