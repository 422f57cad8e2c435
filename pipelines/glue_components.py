"""KFP wrappers of the curriculum's glue steps (``pipelines.glue``): typed signature, one call."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from components.images import CPU_IMAGE

__all__ = ["compare", "curate", "prepare_model"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def prepare_model(code_version: str, model: Output[Model], source: str = "") -> None:
    """The starting policy as a model artifact: a folder path, or '' for the embedded default."""
    from pipelines.glue import materialize_model

    materialize_model(source, model.path)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def curate(
    code_version: str,
    admitted: Input[Dataset],
    verdicts: Input[Dataset],
    train_pool: Output[Dataset],
    expert_pool: Output[Dataset],
    heldout: Output[Dataset],
    metrics: Output[Metrics],
    heldout_fraction: float = 0.25,
    expert_tasks: str = "",
    expert_count: int = 4,
    seed: int = 0,
) -> None:
    """Admitted tasks -> phase-1 pool, phase-2 (high-quality) pool, held-out tasks."""
    import json
    import pathlib

    from pipelines.glue import curate_pools

    values = curate_pools(
        admitted.path, verdicts.path, train_pool.path, expert_pool.path, heldout.path,
        heldout_fraction=heldout_fraction, expert_tasks=expert_tasks, expert_count=expert_count,
        seed=seed,
    )  # fmt: skip
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def compare(
    code_version: str,
    base_results: Input[Dataset],
    final_results: Input[Dataset],
    report: Output[HTML],
    metrics: Output[Metrics],
) -> None:
    """Base vs final policy on the held-out tasks -> the curriculum's HTML report."""
    import json
    import pathlib

    from pipelines.glue import compare_evals

    values = compare_evals(base_results.path, final_results.path, report.path)
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
