"""Pipeline parameters declared once: a dataclass whose fields say where each default comes from.

    @dataclass(frozen=True)
    class NightlyParams:
        model: str = own("")
        \"\"\"The policy to evaluate (a model folder); '' is the embedded SmolLM2-135M.\"\"\"
        max_turns: int = stage("eval.max_turns")
        \"\"\"Assistant turns per episode.\"\"\"

    pipeline_parameters(NightlyParams, preset, given)  -> [PipelineParameter(name, type, default, doc)]
    pipeline_function(NightlyParams, compose, ...)     -> the function ``@dsl.pipeline`` compiles:
                                                          its signature and ``Args:`` are generated

A parameter's default is, the first that applies:

    given      compile-time values of the shape (code version, the cluster's sandbox settings)
    preset     the pipeline's named preset (``pipelines.presets``): a deliberate difference, with its reason
    own        a knob of the pipeline alone (no stage config has it), e.g. the expert pool's size
    stage      the default of the stage config field(s) it feeds: the one source of that setting

A field's attribute docstring is its description in the Kubeflow UI. Inside the
pipeline the dataclass holds kfp's pipeline channels, one per parameter, so the
builders read ``params.max_turns`` rather than taking 49 arguments.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipelines.options import STAGE_CONFIGS
from pipelines.presets import Preset
from termrl.errors import ConfigError
from termrl.settings import field_defaults

__all__ = [
    "CONFIGS",
    "PipelineParameter",
    "as_parameter",
    "field_docs",
    "from_shape",
    "is_platform",
    "own",
    "pipeline_function",
    "pipeline_parameters",
    "stage",
    "stage_default",
    "stage_links",
]

CONFIGS = {**STAGE_CONFIGS, "demonstrate": "components.demonstrate.config:DemonstrateConfig"}
"""Stage name (the prefix of a link such as ``rollout.max_turns``) -> its config class."""

_OWN, _STAGE, _SHAPE, _PLATFORM = "own", "stage", "shape", "platform"


def own(default: Any, *, platform: bool = False) -> Any:
    """A knob of the pipeline alone, with its default here. ``platform``: it places the stages
    (accelerator, code version) rather than configuring one; the Argo nightly fixes those."""
    return dataclasses.field(metadata={"kind": _PLATFORM if platform else _OWN, "default": default})


def stage(*links: str) -> Any:
    """A knob that sets the stage config field(s) ``links`` (``"rollout.max_turns"``): its default
    is theirs, which must agree unless the pipeline's preset names the knob."""
    if not links:
        raise TypeError("stage() needs at least one STAGE.FIELD link")
    return dataclasses.field(metadata={"kind": _STAGE, "links": links})


def from_shape() -> Any:
    """A knob whose default only the shape knows (the code version): a platform knob."""
    return dataclasses.field(metadata={"kind": _SHAPE})


def stage_links(params: type) -> dict[str, tuple[str, ...]]:
    """Each stage-linked parameter of ``params`` -> the ``STAGE.FIELD`` links it sets."""
    return {
        f.name: f.metadata["links"]
        for f in dataclasses.fields(params)
        if f.metadata.get("kind") == _STAGE
    }


def is_platform(params: type, name: str) -> bool:
    """Whether parameter ``name`` places the stages (accelerator, code version)."""
    kind = next(f.metadata.get("kind") for f in dataclasses.fields(params) if f.name == name)
    return kind in (_PLATFORM, _SHAPE)


def _config_default(config: type, path: str) -> Any:
    """The default of ``path`` (``agent.prompt_style``: a field of a nested config) in ``config``."""
    head, _, rest = path.partition(".")
    found = {f.name: f for f in dataclasses.fields(config)}
    if head not in found:
        flat = field_defaults(config)  # a flat key of a nested setting (``sandbox_backend``)
        if not rest and head in flat:
            return flat[head]
        raise ConfigError(f"{config.__name__} has no field {head!r}")
    spec = found[head]
    if spec.default is not dataclasses.MISSING:
        value = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        value = spec.default_factory()
    else:
        raise ConfigError(f"{config.__name__}.{head} has no default")
    for name in rest.split(".") if rest else ():
        value = getattr(value, name)
    return value


def as_parameter(value: Any, kind: type) -> Any:
    """A config value in a pipeline parameter's type: None is the type's empty value (the
    components read '' and 0 as unset), a tuple is comma-separated, a path is its text."""
    if value is None:
        return kind()
    if isinstance(value, tuple | list) and kind is str:
        return ",".join(str(v) for v in value)
    if isinstance(value, Path) and kind is str:
        return str(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind):
        raise ConfigError(f"default {value!r} is not a {kind.__name__}")
    return value


def stage_default(link: str, kind: type) -> Any:
    """The default of stage config field ``link`` (``"rollout.max_turns"``) as a ``kind`` parameter."""
    stage_name, _, path = link.partition(".")
    if stage_name not in CONFIGS or not path:
        raise ConfigError(f"{link!r} is not STAGE.FIELD with STAGE one of {', '.join(CONFIGS)}")
    module, name = CONFIGS[stage_name].split(":")
    config = getattr(importlib.import_module(module), name)
    try:
        return as_parameter(_config_default(config, path), kind)
    except ConfigError as exc:
        raise ConfigError(f"{link}: {'; '.join(exc.problems)}") from exc


def field_docs(cls: type) -> dict[str, str]:
    """Each field's attribute docstring (the string literal under it), as in the stage configs."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


@dataclasses.dataclass(frozen=True)
class PipelineParameter:
    """One parameter as the Kubeflow UI shows it."""

    name: str
    kind: type
    default: Any
    doc: str


def _default(spec: dataclasses.Field, kind: type, preset: Preset, given: Mapping[str, Any]) -> Any:
    """``spec``'s default: given < preset < own < stage (see the module docstring)."""
    if spec.name in given:
        return given[spec.name]
    if spec.name in preset.values:
        return preset.values[spec.name].value
    meta = spec.metadata
    if meta["kind"] in (_OWN, _PLATFORM):
        default = meta["default"]
        return dict(default) if isinstance(default, dict) else default
    if meta["kind"] == _SHAPE:
        raise ConfigError(f"{spec.name}: its default comes from the shape, which gave none")
    found = {link: stage_default(link, kind) for link in meta["links"]}
    if len(set(map(repr, found.values()))) > 1:
        raise ConfigError(
            f"{spec.name} sets fields whose defaults differ ({found}): name it in the preset "
            "with the value and its reason, or split it into one parameter per stage"
        )
    return next(iter(found.values()))


def pipeline_parameters(
    params: type, preset: Preset, given: Mapping[str, Any] | None = None
) -> list[PipelineParameter]:
    """Every field of ``params`` as a pipeline parameter with its resolved default and doc (a value
    the preset chose says so in the doc, with the reason: the UI shows why it differs)."""
    given = given or {}
    hints = typing.get_type_hints(params)
    docs = field_docs(params)
    fields = dataclasses.fields(params)
    names = {f.name for f in fields}
    problems = [
        f"{params.__name__}.{f.name} has no docstring" for f in fields if f.name not in docs
    ]
    problems += [
        f"preset {preset.name} names no parameter {n!r}" for n in preset.values if n not in names
    ]
    problems += [
        f"{params.__name__} has no parameter {n!r} to give" for n in given if n not in names
    ]
    if problems:
        raise ConfigError(problems)
    for name, chosen in preset.values.items():
        if name not in given:
            docs[name] += f" Preset {preset.name}: {chosen.why}."
    return [
        PipelineParameter(
            f.name, hints[f.name], _default(f, hints[f.name], preset, given), docs[f.name]
        )
        for f in fields
    ]


def _args_section(parameters: list[PipelineParameter]) -> str:
    """A Google-style ``Args:`` section: kfp reads each parameter's description from it."""
    # One line each: the UI shows the description as written, without the source's line breaks.
    return "\n".join(["Args:", *(f"    {p.name}: {' '.join(p.doc.split())}" for p in parameters)])


def pipeline_function(
    params: type,
    compose: Callable[[Any], None],
    *,
    name: str,
    summary: str,
    preset: Preset,
    given: Mapping[str, Any] | None = None,
) -> Callable[..., None]:
    """A function with one parameter per field of ``params`` (its type, default and doc) that
    calls ``compose(params(...))``: what ``@dsl.pipeline`` turns into the pipeline's inputs."""
    declared = pipeline_parameters(params, preset, given)

    def pipeline(*values: Any, **named: Any) -> None:
        compose(params(*values, **named))

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    pipeline.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p.name, kind, default=p.default, annotation=p.kind) for p in declared],
        return_annotation=None,
    )
    pipeline.__doc__ = f"{summary}\n\n{_args_section(declared)}\n"
    pipeline.__name__ = pipeline.__qualname__ = name.replace("-", "_")
    return pipeline
