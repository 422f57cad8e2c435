"""The eval stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. ``run_id`` names the run in the results and the
report (the curriculum evaluates ``base`` and ``final`` on the same tasks).
"""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE

__all__ = ["evaluate"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def evaluate(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    results: Output[Dataset],
    report: Output[HTML],
    metrics: Output[Metrics],
    run_id: str = "policy",
    trials: int = 1,
    max_turns: int = 4,
    max_new_tokens: int = 192,
    concurrency: int = 2,
    backend: str = "podman",
    sandbox_namespace: str = "",
    sandbox_registry: str = "",
    sandbox_pull_secret: str = "",
    prompt_style: str = "compact",
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Trials of ``policy`` on ``tasks`` (Terminal-Bench scoring) -> results, HTML report, metrics."""
    import json
    import pathlib

    from components.eval.config import EvalConfig
    from components.eval.stage import main
    from components.eval.summary import flat_metrics
    from components.progress import progress_folder
    from termrl.settings import build_config

    summary = main(
        build_config(
            EvalConfig,
            dict(
                tasks=tasks.path,
                out=results.path,
                report=report.path,
                model=policy.path,
                run_id=run_id,
                trials=trials,
                max_turns=max_turns,
                max_new_tokens=max_new_tokens,
                concurrency=concurrency,
                backend=backend,
                prompt_style=prompt_style,
                progress=False,
                parts=str(progress_folder("eval", results.uri)),
                sandbox_namespace=sandbox_namespace,
                sandbox_registry=sandbox_registry,
                sandbox_pull_secret=sandbox_pull_secret,
            ),
            options,
        )
    )
    values = flat_metrics(summary)
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
