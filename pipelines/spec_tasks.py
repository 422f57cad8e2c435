"""The tasks of a PipelineSpec that run, through the sub-DAGs of ``dsl.If``/``dsl.Else``.

kfp compiles a ``dsl.If``/``dsl.Else`` pair into DAG tasks: a ``condition-branches-N``
task whose component is a DAG of one ``condition-N`` task per branch (each with its
``trigger_policy.condition``), whose component is in turn a DAG of the branch's tasks.
A ``dsl.OneOf`` over the branches' outputs is an output of the ``condition-branches``
DAG with one selector per branch. Only the leaves (components with an executor) run;
kfp's local runner names each by its component (``comp-continue-from-2`` runs as
``continue-from-2``), a name unique in the pipeline.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from kfp.local import graph_utils
from kfp.pipeline_spec import pipeline_spec_pb2

__all__ = ["Leaf", "leaf_tasks", "output_sources"]


@dataclass(frozen=True)
class Leaf:
    """One task that runs a component."""

    name: str
    """kfp local's name for it: its component's, without ``comp-``."""
    display_name: str
    task: pipeline_spec_pb2.PipelineTaskSpec
    branches: tuple[str, ...]
    """The ``dsl.If``/``dsl.Else`` branches (their ``condition-N`` tasks) it sits in, outermost
    first: it runs only when all of them are taken. Empty: it always runs."""


def leaf_tasks(spec: pipeline_spec_pb2.PipelineSpec) -> dict[str, Leaf]:
    """Every leaf of ``spec`` by local name, in the order kfp's local runner may run them."""

    def walk(dag: pipeline_spec_pb2.DagSpec, branches: tuple[str, ...]) -> Iterator[Leaf]:
        # kfp pops from the end of its topological order
        for key in reversed(graph_utils.topological_sort_tasks(dag.tasks)):
            task = dag.tasks[key]
            inner = (*branches, key) if task.trigger_policy.condition else branches
            component = spec.components[task.component_ref.name]
            if component.HasField("dag"):
                yield from walk(component.dag, inner)
            else:
                name = task.component_ref.name.removeprefix("comp-")
                yield Leaf(name, task.task_info.name or key, task, inner)

    return {leaf.name: leaf for leaf in walk(spec.root.dag, ())}


def output_sources(
    spec: pipeline_spec_pb2.PipelineSpec, task_name: str, key: str
) -> list[tuple[str, str]]:
    """The leaves (local name, output key) that can produce artifact ``key`` of root task
    ``task_name``: the task itself, or one per branch of a ``dsl.OneOf`` (exactly one of which ran)."""

    def sources(dag: pipeline_spec_pb2.DagSpec, name: str, key: str) -> Iterator[tuple[str, str]]:
        component = spec.components[dag.tasks[name].component_ref.name]
        if not component.HasField("dag"):
            yield dag.tasks[name].component_ref.name.removeprefix("comp-"), key
            return
        for selector in component.dag.outputs.artifacts[key].artifact_selectors:
            yield from sources(
                component.dag, selector.producer_subtask, selector.output_artifact_key
            )

    return list(sources(spec.root.dag, task_name, key))
