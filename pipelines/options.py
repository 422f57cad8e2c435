"""Pipeline arguments from ``--set``: pipeline parameters, and any stage config field by ``stage.field``.

    termrl run --set groups=16 --set train.negative_weight=0.5 --set rollout.drop_ratio_limit=0.3
      groups=16                      -> the pipeline parameter ``groups``
      train.negative_weight=0.5      -> ``train_options = {"negative_weight": 0.5}``, typed by TrainConfig
      rollout.drop_ratio_limit=0.3   -> ``rollout_options = {...}``, typed by RolloutConfig

``<stage>_options`` is an ordinary pipeline parameter (a JSON object), so a
Kubeflow UI user edits the same names in "Clone run", and ``termrl rerun``
writes a stage's ``options`` with the same typing. Every problem is reported
at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from termrl.errors import ConfigError
from termrl.settings import jsonable, parse_settings, split_item

__all__ = ["STAGE_CONFIGS", "pipeline_arguments", "stage_config", "stage_options"]

STAGE_CONFIGS = {
    "synthesize": "components.synthesize.config:SynthesizeConfig",
    "verify": "components.verify.config:VerifyConfig",
    "rollout": "components.rollout.config:RolloutConfig",
    "train": "components.train.config:TrainConfig",
    "eval": "components.eval.config:EvalConfig",
}
"""Stage name (the prefix of ``stage.field`` and of ``<stage>_options``) -> its config class."""

_KINDS = {"evaluate": "eval"}
"""Component names that differ from the stage's name."""


def stage_config(stage: str) -> type:
    """The config class of ``stage`` (a stage name or a component name such as ``evaluate``)."""
    stage = _KINDS.get(stage, stage)
    if stage not in STAGE_CONFIGS:
        raise ConfigError(f"no stage {stage!r} takes options; stages: {', '.join(STAGE_CONFIGS)}")
    module, name = STAGE_CONFIGS[stage].split(":")
    return getattr(importlib.import_module(module), name)


def stage_options(stage: str, items: Iterable[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` items of one stage as a JSON options object, typed by its config."""
    return jsonable(parse_settings(stage_config(stage), items))


def pipeline_arguments(defaults: Mapping[str, Any], settings: Iterable[str]) -> dict[str, Any]:
    """``--set`` items -> the pipeline's arguments (only the ones given)."""
    plain: list[str] = []
    staged: dict[str, list[str]] = {}
    problems: list[str] = []
    for item in settings:
        try:
            key, text = split_item(item)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        stage, dot, field = key.partition(".")
        if dot:
            staged.setdefault(stage, []).append(f"{field}={text}")
        else:
            plain.append(item)
    values: dict[str, Any] = {}
    try:
        values = parse_settings(defaults, plain)
    except ConfigError as exc:
        problems.extend(exc.problems)
    for stage, items in staged.items():
        parameter = f"{stage}_options"
        if parameter not in defaults:
            takes = sorted(k.removesuffix("_options") for k in defaults if k.endswith("_options"))
            problems.append(
                f"{stage}.*: this pipeline passes no options to a {stage!r} stage "
                f"(stages with options: {', '.join(takes) or 'none'})"
            )
            continue
        try:
            given = values.get(parameter) or defaults[parameter] or {}
            values[parameter] = {**given, **stage_options(stage, items)}
        except ConfigError as exc:
            problems.extend(f"{stage}: {p}" for p in exc.problems)
    if problems:
        raise ConfigError(problems)
    return values
