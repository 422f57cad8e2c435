"""Rerun one stage of an earlier local run on that run's upstream artifacts.

The earlier run's ``run.json`` names every task's outputs. The rerun builds a
one-stage pipeline: one ``dsl.importer`` per input artifact (pointing at the
earlier run's output, so nothing upstream executes again), then the stage
itself with the parameters it ran with, changed by ``--set``. Keys that are not
parameters of the stage's component go into its ``options`` dict, which
reaches any field of the stage's config. The rerun runs on kfp's local runner
like the original (cached: the same rerun twice executes once) and writes its
own record under ``RUN_DIR/reruns/``.
"""

import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kfp import dsl
from kfp.dsl import types as kfp_types
from kfp.local import executor_output_utils

from pipelines.curriculum import CurriculumShape, build_curriculum, make_ops
from pipelines.local import RunRecord, run_pipeline_locally
from pipelines.options import stage_options
from termrl.errors import ConfigError
from termrl.settings import parse_typed

__all__ = ["RerunPlan", "plan_rerun", "rerun_stage"]

_PARAMETER_TYPES = {
    1: float,
    2: int,
    3: str,
    4: bool,
}  # ParameterType: NUMBER_DOUBLE, NUMBER_INTEGER, STRING, BOOLEAN


class RerunPlan:
    """What a rerun of ``task`` needs: its component, parameters and input artifact URIs."""

    def __init__(
        self,
        task: str,
        kind: str,
        component: Any,
        parameters: dict[str, Any],
        artifacts: dict[str, tuple[str, type]],
    ):
        self.task, self.kind, self.component = task, kind, component
        self.parameters, self.artifacts = parameters, artifacts


def _pipeline_for(record: RunRecord) -> Any:
    if record.pipeline == "termrl-curriculum":
        return build_curriculum(CurriculumShape(**record.shape))
    if record.pipeline == "termrl-nightly-eval":
        from pipelines.nightly_eval import build_nightly_eval

        return build_nightly_eval()
    raise ConfigError(f"cannot rerun stages of pipeline {record.pipeline!r}")


def plan_rerun(record: RunRecord, task: str, settings: Iterable[str]) -> RerunPlan:
    """Resolve ``task`` of ``record`` into a rerun plan (every problem reported at once)."""
    pipeline = _pipeline_for(record)
    spec = pipeline.pipeline_spec
    by_local = {
        t.component_ref.name.removeprefix("comp-"): (name, t)
        for name, t in spec.root.dag.tasks.items()
    }
    if task not in by_local:
        kinds = sorted(by_local)
        raise ConfigError(f"no stage {task!r} in {record.run_dir}; stages: {', '.join(kinds)}")
    _, task_spec = by_local[task]
    component_spec = spec.components[task_spec.component_ref.name]
    kind = re.sub(r"-\d+$", "", task).replace("-", "_")
    ops = make_ops(CurriculumShape().cpu_image, CurriculumShape().gpu_image).by_name
    problems: list[str] = []

    parameters: dict[str, Any] = {}
    for name, value in task_spec.inputs.parameters.items():
        if value.component_input_parameter:
            parameters[name] = record.arguments[value.component_input_parameter]
        elif value.HasField("runtime_value"):
            parameters[name] = executor_output_utils.pb2_value_to_python(
                value.runtime_value.constant
            )
    declared = component_spec.input_definitions.parameters
    types = {
        name: _PARAMETER_TYPES.get(p.parameter_type, Any)
        for name, p in declared.items()
        if name != "options"
    }
    items = list(settings)
    own = [item for item in items if _key(item) in types]
    try:
        parameters.update(parse_typed(types, own))
        if len(own) < len(items):
            others = [item for item in items if _key(item) not in types]
            parameters["options"] = {
                **(parameters.get("options") or {}),
                **stage_options(kind, others),
            }
    except ConfigError as exc:
        problems.extend(exc.problems)
    for name in list(parameters):
        if name not in declared:
            parameters.pop(
                name
            )  # resource placeholders (accelerator): no meaning for the local runner
        elif _PARAMETER_TYPES.get(declared[name].parameter_type) is int and isinstance(
            parameters[name], float
        ):
            parameters[name] = int(parameters[name])

    artifacts: dict[str, tuple[str, type]] = {}
    for name, value in task_spec.inputs.artifacts.items():
        producer = value.task_output_artifact.producer_task
        key = value.task_output_artifact.output_artifact_key
        producer_local = spec.root.dag.tasks[producer].component_ref.name.removeprefix("comp-")
        uri = (
            record.tasks.get(producer_local).outputs.get(key)
            if producer_local in record.tasks
            else None
        )
        if not uri or not Path(uri).exists():
            problems.append(
                f"input {name!r}: output {key!r} of {producer_local!r} is not on disk ({uri})"
            )
            continue
        schema = component_spec.input_definitions.artifacts[name].artifact_type.schema_title
        artifacts[name] = (
            uri,
            kfp_types.type_utils.ARTIFACT_CLASSES_MAPPING[schema.removeprefix("system.").lower()],
        )
    if problems:
        raise ConfigError(problems)
    return RerunPlan(task, kind, ops[kind], parameters, artifacts)


def _key(item: str) -> str:
    return item.partition("=")[0].strip()


def _one_stage_pipeline(plan: RerunPlan, *, cache: bool) -> Callable[..., Any]:
    @dsl.pipeline(name=f"termrl-rerun-{plan.task}")
    def rerun() -> None:
        kwargs = dict(plan.parameters)
        for name, (uri, cls) in plan.artifacts.items():
            kwargs[name] = dsl.importer(artifact_uri=uri, artifact_class=cls, reimport=False).output
        plan.component(**kwargs).set_display_name(f"rerun · {plan.task}").set_caching_options(cache)

    return rerun


def rerun_stage(
    run_dir: str | Path,
    task: str,
    settings: Iterable[str],
    *,
    cache_dir: str | Path | None = None,
    cache: bool = True,
    echo: Callable[[str], None] | None = None,
    verbose: bool = False,
) -> tuple[RerunPlan, RunRecord]:
    """Rerun ``task`` of the run in ``run_dir``; returns the plan and the rerun's record."""
    record = RunRecord.load(run_dir)
    plan = plan_rerun(record, task, settings)
    pipeline = _one_stage_pipeline(plan, cache=cache)
    out = Path(run_dir) / "reruns" / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    cache_dir = cache_dir or record.cache_dir or Path(record.run_dir).parent / ".cache"
    result = run_pipeline_locally(
        pipeline,
        {},
        run_dir=out,
        cache_dir=cache_dir,
        shape={"rerun_of": record.run_dir, "task": task},
        echo=echo,
        verbose=verbose,
    )
    return plan, result
