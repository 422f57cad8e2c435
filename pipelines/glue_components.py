"""KFP wrappers of the curriculum's glue steps (``pipelines.glue``): typed signature, one call."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

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
    imitation_pool: Output[Dataset],
    train_pool: Output[Dataset],
    expert_pool: Output[Dataset],
    metrics: Output[Metrics],
    imitation_fraction: float,
    expert_tasks: str,
    expert_count: int,
    seed: int,
) -> None:
    """Admitted tasks -> imitation pool, phase-1 pool (the rest), phase-2 (high-quality) pool.

    Args:
        imitation_fraction: Share of each family's tasks whose demonstrations the imitation
            step trains on; phase 1 learns on the others.
        expert_tasks: A tasks artifact or a folder of Terminal-Bench tasks for phase 2 ('' picks the
            expert_count best-verified admitted tasks).
        expert_count: Size of the phase-2 pool when expert_tasks is ''.
        seed: Seed of the imitation pool's pick (a hash of seed and task id).

    No defaults: the curriculum's parameters (``CurriculumParams``) are their one source.
    """
    import json
    import pathlib

    from pipelines.glue import curate_pools

    values = curate_pools(
        admitted.path,
        verdicts.path,
        imitation_pool.path,
        train_pool.path,
        expert_pool.path,
        imitation_fraction=imitation_fraction,
        expert_tasks=expert_tasks,
        expert_count=expert_count,
        seed=seed,
    )
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def compare(
    code_version: str,
    base_results: Input[Dataset],
    final_results: Input[Dataset],
    report: Output[HTML],
    metrics: Output[Metrics],
    imitation_results: Input[Dataset] = None,
    phase1_results: Input[Dataset] = None,
    extra_results: Input[Dataset] = None,
    health: Input[Artifact] = None,
    heldout_families: str = "",
) -> None:
    """Policies on the held-out tasks -> the curriculum's HTML report and comparison metrics.

    The policies are compared in the order base, imitation, phase 1, final,
    extra (those given): each with its pass rate and 95 % interval, each later
    one with its paired difference vs base (interval, tasks gained and lost).
    A policy is named by the run_id its eval wrote.

    Args:
        base_results: Eval results of the starting policy (the base of every difference).
        final_results: Eval results of the final policy.
        imitation_results: Optional eval results of the policy after the imitation step.
        phase1_results: Optional eval results of the policy after phase 1.
        extra_results: Optional eval results of one more policy, shown last (e.g. an ablation).
        health: Optional last health report of the RL rounds: every round's verdict and reasons
            become the report's "Training health" section.
        heldout_families: Comma-separated task families no policy was trained on; their
            pass rate is reported apart ('' for none).
    """
    import json
    import pathlib

    from components.eval.compare import family_list
    from components.eval.report import compare_files
    from components.health.report import read_report, to_html

    slots = [
        ("base", base_results),
        ("imitation", imitation_results),
        ("phase1", phase1_results),
        ("final", final_results),
        ("extra", extra_results),
    ]
    sections = (
        [("Training health", to_html(read_report(health.path)))] if health is not None else []
    )
    values = compare_files(
        report.path,
        [(slot, a.path) for slot, a in slots if a is not None],
        heldout_families=family_list(heldout_families),
        sections=sections,
    )
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
