"""The eval stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. ``run_id`` names the run in the results and the
report (the curriculum evaluates ``base`` and ``final`` on the same tasks). A
parameter left unset (None) takes ``EvalConfig``'s default; the ``Args:`` the
docstring leaves out come from its field docs (``components.params``).
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from components.eval.config import EvalConfig
from components.images import GPU_IMAGE
from components.params import described

__all__ = ["evaluate"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
@described(EvalConfig)
def evaluate(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    results: Output[Dataset],
    report: Output[HTML],
    metrics: Output[Metrics],
    run_id: Optional[str] = None,
    trials: Optional[int] = None,
    max_turns: Optional[int] = None,
    max_new_tokens: Optional[int] = None,
    concurrency: Optional[int] = None,
    sandbox_backend: Optional[str] = None,
    sandbox_namespace: Optional[str] = None,
    sandbox_registry: Optional[str] = None,
    sandbox_pull_secret: Optional[str] = None,
    prompt_style: Optional[str] = None,
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """``policy`` on ``tasks``, each in a fresh sandbox -> eval results, an HTML report, metrics.

    Args:
        tasks: Tasks artifact to evaluate on (the held-out tasks in the curriculum).
        policy: The policy (a Hugging Face model folder).
        results: Eval results: one row per task and trial.
        report: Self-contained HTML report of the results.
        metrics: Pass rate, its interval and failure modes, for the Kubeflow UI.
        options: Any other EvalConfig field (JSON values); wins over the parameters above.
    """
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
                prompt_style=prompt_style,
                progress=False,
                parts=str(progress_folder("eval", results.uri)),
                sandbox_backend=sandbox_backend,
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
