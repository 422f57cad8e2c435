"""The task environments a cluster run needs, synthesized here as the compiled pipeline will.

On a cluster the sandbox stages run each task in a pod of ``REG/termrl/env:<hash>``
(the kubernetes backend builds nothing). Those images are built and pushed by a step
before the run, on a machine with podman (``termrl images push-tasks``), not by a
pipeline stage: building an image inside a pod needs a privileged builder (podman,
buildah) or an in-cluster build service, and a KFP stage is given neither.

That works because procedural synthesis is a pure function of the code version and
the synthesize stages' arguments: the tasks synthesized here from the compiled
pipeline's own arguments are the tasks its synthesize stages will write, with the
same environment files and so the same image names.

    pipeline_synthesize_arguments(yaml, settings)   each synthesize task of the compiled pipeline:
                                                    its arguments (defaults, then --set)
    synthesize_pipeline_tasks(yaml, settings, dest) run each one here -> tasks artifacts to push

LLM-written tasks (``synth_llm_model``) are not reproducible and are refused here;
tasks given by path (``expert_tasks``) are pushed with ``--tasks``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from termrl.errors import ConfigError

__all__ = ["FromTask", "pipeline_synthesize_arguments", "synthesize_pipeline_tasks"]


@dataclass(frozen=True)
class FromTask:
    """An artifact argument: the tasks another synthesize task of the pipeline writes."""

    task: str


_SYNTHESIZE = re.compile(r"comp-synthesize(-\d+)?")
"""The synthesize component's names in a compiled pipeline (kfp numbers the variants: comp-synthesize-2)."""


def pipeline_synthesize_arguments(
    pipeline_yaml: str | Path, settings: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """Task name -> the arguments the compiled pipeline passes its synthesize component there."""
    from google.protobuf import json_format

    from pipelines.compile import read_compiled
    from pipelines.local import spec_defaults
    from pipelines.options import pipeline_arguments

    spec, _ = read_compiled(pipeline_yaml)
    defaults = spec_defaults(spec)
    values = {**defaults, **pipeline_arguments(defaults, settings)}
    calls: dict[str, dict[str, Any]] = {}
    for name, task in spec.root.dag.tasks.items():
        if not _SYNTHESIZE.fullmatch(task.component_ref.name):
            continue
        arguments: dict[str, Any] = {}
        for key, given in task.inputs.parameters.items():
            if given.component_input_parameter:
                arguments[key] = values[given.component_input_parameter]
            else:  # a constant: protobuf numbers are doubles
                value = json_format.MessageToDict(given.runtime_value.constant)
                arguments[key] = (
                    int(value) if isinstance(value, float) and value.is_integer() else value
                )
        for key, given in task.inputs.artifacts.items():  # the held-out set avoids the training set
            arguments[key] = FromTask(given.task_output_artifact.producer_task)
        calls[name] = arguments
    if not calls:
        raise ConfigError(f"{pipeline_yaml}: the pipeline has no synthesize task")
    if llm := sorted(name for name, arguments in calls.items() if arguments.get("llm_model")):
        raise ConfigError(
            f"{', '.join(llm)}: LLM-written tasks differ from run to run, so their environments "
            "cannot be built ahead; synthesize them, then push with --tasks"
        )
    return calls


def synthesize_pipeline_tasks(
    pipeline_yaml: str | Path, settings: Iterable[str], dest: Path
) -> list[Path]:
    """Run each synthesize task of the compiled pipeline here (its component body, its arguments).

    Returns the tasks artifacts in the order they were made: by task name, except that a task that
    reads another's tasks (``avoid``: the held-out set) comes after it.
    """
    from components.synthesize.component import synthesize

    dest.mkdir(parents=True, exist_ok=True)
    calls = pipeline_synthesize_arguments(pipeline_yaml, settings)
    # A task that reads another's tasks (``avoid``) runs after it.
    # (A compiled spec's task map has no fixed order: sort by name for one.)
    order = sorted(
        calls, key=lambda n: (any(isinstance(v, FromTask) for v in calls[n].values()), n)
    )
    paths = {}
    for name in order:
        path = dest / f"{name}.parquet"
        metrics = SimpleNamespace(path=str(dest / f"{name}.metrics.json"), metadata={})
        arguments = {
            key: SimpleNamespace(path=str(paths[value.task]))
            if isinstance(value, FromTask)
            else value
            for key, value in calls[name].items()
        }
        synthesize.python_func(tasks=SimpleNamespace(path=str(path)), metrics=metrics, **arguments)
        paths[name] = path
    return [paths[name] for name in order]
