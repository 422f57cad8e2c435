"""The verify stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The judge panel is a comma-separated string because a
pipeline parameter cannot be a tuple; ``local`` is the policy model, served from
the ``judge_model`` artifact (the curriculum's base model).
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.images import CPU_IMAGE

__all__ = ["verify"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def verify(
    code_version: str,
    tasks: Input[Dataset],
    judge_model: Input[Model],
    verdicts: Output[Dataset],
    admitted: Output[Dataset],
    metrics: Output[Metrics],
    repeats: int = 1,
    judges: str = "",
    concurrency: int = 2,
    sandbox_backend: str = "podman",
    sandbox_namespace: str = "",
    sandbox_registry: str = "",
    sandbox_pull_secret: str = "",
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Ground truth, no-op, ablation, state replay (and judges) -> verdicts + admitted tasks."""
    import json
    import pathlib

    from components.verify.config import VerifyConfig
    from components.verify.stage import main
    from termrl.settings import build_config

    results = main(
        build_config(
            VerifyConfig,
            dict(
                tasks=tasks.path,
                out=verdicts.path,
                admitted=admitted.path,
                repeats=repeats,
                judges=tuple(j for j in judges.split(",") if j),
                local_judge_model=judge_model.path,
                concurrency=concurrency,
                sandbox_backend=sandbox_backend,
                progress=False,
                sandbox_namespace=sandbox_namespace,
                sandbox_registry=sandbox_registry,
                sandbox_pull_secret=sandbox_pull_secret,
            ),
            options,
        )
    )
    values = {
        "verify/tasks": float(len(results)),
        "verify/admitted": float(sum(v.admitted for v in results)),
    }
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
