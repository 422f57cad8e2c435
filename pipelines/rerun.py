"""Rerun one stage of an earlier local run on that run's upstream artifacts.

The earlier run's ``run.json`` names every task's outputs. The rerun builds a
one-stage pipeline: one ``dsl.importer`` per input artifact (pointing at the
earlier run's output, so nothing upstream executes again), then the stage
itself with the parameters it ran with, changed by ``--set``. Keys that are not
parameters of the stage's component go into its ``options`` dict, which
reaches any field of the stage's config. The rerun runs on kfp's local runner
like the original (cached: the same rerun twice executes once) and writes its
own record under ``RUN_DIR/reruns/``.

It runs by the runner the run recorded (``RunnerChoice.or_recorded``), in the
run's cache: a ``--runner docker`` run's stage reruns in the stage image, its
imported inputs mounted read-only at their own paths (outside the rerun's
pipeline root, which kfp mounts). Another runner, asked for, runs in its own
cache beside the run folder.
"""

import dataclasses
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kfp import dsl
from kfp.dsl import types as kfp_types
from kfp.local import executor_output_utils

from pipelines.curriculum import CurriculumShape, build_curriculum, make_ops
from pipelines.docker_runner import RunnerChoice
from pipelines.local import RunRecord, run_pipeline_locally
from pipelines.options import stage_options
from pipelines.spec_tasks import leaf_tasks, output_sources
from pipelines.versioning import source_version
from termrl.errors import ConfigError
from termrl.settings import parse_typed

__all__ = ["RerunPlan", "plan_rerun", "rerun_cache_dir", "rerun_stage"]

_PARAMETER_TYPES = {
    1: float,
    2: int,
    3: str,
    4: bool,
}  # ParameterType: NUMBER_DOUBLE, NUMBER_INTEGER, STRING, BOOLEAN


class RerunPlan:
    """What a rerun of ``task`` needs: its component, parameters and input artifact URIs, and
    where it runs (``runner``; ``recorded_runner`` ran the run)."""

    def __init__(
        self,
        task: str,
        kind: str,
        component: Any,
        parameters: dict[str, Any],
        artifacts: dict[str, tuple[str, type]],
        runner: RunnerChoice,
        recorded_runner: str,
    ):
        self.task, self.kind, self.component = task, kind, component
        self.parameters, self.artifacts = parameters, artifacts
        self.runner, self.recorded_runner = runner, recorded_runner


def _shape(record: RunRecord) -> CurriculumShape:
    """The run's curriculum shape (its record also holds the runner's fields, which are not)."""
    names = {f.name for f in dataclasses.fields(CurriculumShape)}
    return CurriculumShape(**{k: v for k, v in record.shape.items() if k in names})


def _pipeline_for(record: RunRecord) -> Any:
    if record.pipeline == "termrl-curriculum":
        return build_curriculum(_shape(record))
    if record.pipeline == "termrl-nightly-eval":
        from pipelines.nightly_eval import build_nightly_eval

        return build_nightly_eval()
    raise ConfigError(f"cannot rerun stages of pipeline {record.pipeline!r}")


def plan_rerun(
    record: RunRecord, task: str, settings: Iterable[str], runner: RunnerChoice | None = None
) -> RerunPlan:
    """Resolve ``task`` of ``record`` into a rerun plan (every problem reported at once); ``runner``:
    what it leaves unset is the run's."""
    choice = (runner or RunnerChoice()).or_recorded(record.shape)
    if choice.runner == "docker" and not choice.image:
        choice = choice.with_image(source_version())
    spec = _pipeline_for(record).pipeline_spec
    # The stages that always run; a dsl.If branch's hand-on is no stage of its own.
    stages = {name: leaf.task for name, leaf in leaf_tasks(spec).items() if not leaf.branches}
    if task not in stages:
        kinds = sorted(stages)
        raise ConfigError(f"no stage {task!r} in {record.run_dir}; stages: {', '.join(kinds)}")
    task_spec = stages[task]
    component_spec = spec.components[task_spec.component_ref.name]
    kind = re.sub(r"-\d+$", "", task).replace("-", "_")
    shape = _shape(record)
    ops = make_ops(choice.image or shape.cpu_image, choice.image or shape.gpu_image).by_name
    problems: list[str] = []
    parameters = _rerun_parameters(record, task_spec, component_spec, kind, settings, problems)
    artifacts = _rerun_artifacts(record, spec, task_spec, component_spec, problems)
    if problems:
        raise ConfigError(problems)
    recorded = record.shape.get("runner", "subprocess")
    return RerunPlan(task, kind, ops[kind], parameters, artifacts, choice, recorded)


def _rerun_parameters(
    record: RunRecord,
    task_spec: Any,
    component_spec: Any,
    kind: str,
    settings: Iterable[str],
    problems: list[str],
) -> dict[str, Any]:
    """The parameters the task ran with, changed by ``settings``: a component parameter by
    its own name, any other config field through ``options``. Problems go to ``problems``."""
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
    others = [item for item in items if _key(item) not in types]
    try:
        parameters.update(parse_typed(types, own))
        if others and "options" in declared:
            parameters["options"] = {
                **(parameters.get("options") or {}),
                **stage_options(kind, others),
            }
        elif others:  # a colocated round: its two stages' options apart, as STAGE.FIELD=VALUE
            _update_stage_options(parameters, declared, others, problems)
    except ConfigError as exc:
        problems.extend(exc.problems)
    for name in list(parameters):
        if name not in declared:
            # resource placeholders (accelerator): no meaning for the local runner
            parameters.pop(name)
        elif _PARAMETER_TYPES.get(declared[name].parameter_type) is int and isinstance(
            parameters[name], float
        ):
            parameters[name] = int(parameters[name])
    return parameters


def _rerun_artifacts(
    record: RunRecord, spec: Any, task_spec: Any, component_spec: Any, problems: list[str]
) -> dict[str, tuple[str, type]]:
    """Each input artifact of the task: the URI of the run's output it read, and its class.
    An output not on disk goes to ``problems``."""
    artifacts: dict[str, tuple[str, type]] = {}
    for name, value in task_spec.inputs.artifacts.items():
        output = value.task_output_artifact
        # One source, or one per branch of a dsl.OneOf: the output of the branch that ran.
        sources = output_sources(spec, output.producer_task, output.output_artifact_key)
        uris = [
            record.tasks[local].outputs[key]
            for local, key in sources
            if local in record.tasks and key in record.tasks[local].outputs
        ]
        uri = uris[0] if len(uris) == 1 else None
        if not uri or not Path(uri).exists():
            which = " or ".join(f"output {key!r} of {local!r}" for local, key in sources)
            problems.append(f"input {name!r}: {which} is not on disk ({', '.join(uris) or None})")
            continue
        schema = component_spec.input_definitions.artifacts[name].artifact_type.schema_title
        artifacts[name] = (
            uri,
            kfp_types.type_utils.ARTIFACT_CLASSES_MAPPING[schema.removeprefix("system.").lower()],
        )
    return artifacts


def _update_stage_options(
    parameters: dict[str, Any], declared: Any, items: list[str], problems: list[str]
) -> None:
    """``STAGE.FIELD=VALUE`` items into the task's ``<STAGE>_options`` (a colocated round takes
    ``rollout_options`` and ``train_options``); any other item goes to ``problems``."""
    staged: dict[str, list[str]] = {}
    stages = sorted(name.removesuffix("_options") for name in declared if name.endswith("_options"))
    for item in items:
        stage, dot, rest = item.partition(".")
        if dot and f"{stage}_options" in declared:
            staged.setdefault(stage, []).append(rest)
        else:
            problems.append(
                f"{_key(item)} is not a parameter of this task; set a stage's field as "
                f"{' or '.join(f'{s}.FIELD=VALUE' for s in stages)}"
            )
    for stage, fields in staged.items():
        name = f"{stage}_options"
        parameters[name] = {**(parameters.get(name) or {}), **stage_options(stage, fields)}


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


def rerun_cache_dir(record: RunRecord, plan: RerunPlan) -> Path:
    """The run's cache when the rerun runs by the run's runner, else that runner's beside the run."""
    if plan.runner.runner == plan.recorded_runner and record.cache_dir:
        return Path(record.cache_dir)
    return plan.runner.cache_dir(Path(record.run_dir).parent)


def rerun_stage(
    run_dir: str | Path,
    task: str,
    settings: Iterable[str],
    *,
    runner: RunnerChoice | None = None,
    cache_dir: str | Path | None = None,
    cache: bool = True,
    echo: Callable[[str], None] | None = None,
    verbose: bool = False,
) -> tuple[RerunPlan, RunRecord]:
    """Rerun ``task`` of the run in ``run_dir``; returns the plan and the rerun's record.

    ``runner``: what it leaves unset is the run's; ``cache_dir`` (default: ``rerun_cache_dir``).
    """
    record = RunRecord.load(run_dir)
    plan = plan_rerun(record, task, settings, runner)
    pipeline = _one_stage_pipeline(plan, cache=cache)
    out = Path(run_dir) / "reruns" / f"{task}-{time.strftime('%Y%m%d-%H%M%S')}"
    inputs = tuple(Path(uri) for uri, _ in plan.artifacts.values())
    with plan.runner.kfp_runner(inputs) as kfp_runner:
        result = run_pipeline_locally(
            pipeline,
            {},
            run_dir=out,
            cache_dir=cache_dir or rerun_cache_dir(record, plan),
            shape={"rerun_of": record.run_dir, "task": task, **plan.runner.shape_fields()},
            echo=echo,
            verbose=verbose,
            runner=kfp_runner,
        )
    return plan, result
