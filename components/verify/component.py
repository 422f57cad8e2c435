"""The verify stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The judge panel is a comma-separated string because a
pipeline parameter cannot be a tuple (unset: the config's panel; '': no judges);
``local`` is the policy model, served from the ``judge_model`` artifact (the
curriculum's base model). A parameter left unset (None) takes ``VerifyConfig``'s
default; the ``Args:`` the docstring leaves out come from its field docs
(``components.params``).
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.images import CPU_IMAGE
from components.params import described
from components.verify.config import VerifyConfig

__all__ = ["verify"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
@described(VerifyConfig)
def verify(
    code_version: str,
    tasks: Input[Dataset],
    judge_model: Input[Model],
    verdicts: Output[Dataset],
    admitted: Output[Dataset],
    metrics: Output[Metrics],
    repeats: Optional[int] = None,
    judges: Optional[str] = None,
    require: Optional[str] = None,
    concurrency: Optional[int] = None,
    sandbox_backend: Optional[str] = None,
    sandbox_namespace: Optional[str] = None,
    sandbox_registry: Optional[str] = None,
    sandbox_pull_secret: Optional[str] = None,
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Ground truth, no-op, ablation and judge checks of each task -> verdicts + admitted tasks.

    Args:
        tasks: Tasks artifact to verify.
        judge_model: The model the ``local`` judge runs (served by an in-process ModelProxy).
        verdicts: One verdict per task: every check's result, the judges' rationales, admitted.
        admitted: The tasks that passed every required check (a tasks artifact).
        metrics: Tasks and admitted tasks, for the Kubeflow UI.
        judges: Comma-separated judge panel: litellm models (MODEL or MODEL@BASE_URL) and
            ``local``; '' runs no judges. Unset: the config's panel (local).
        require: Comma-separated checks a task must pass; ablation and the state replay run
            only when named. Unset: the config's (every sandbox check).
        options: Any other VerifyConfig field (JSON values); wins over the parameters above.
    """
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
                judges=tuple(j for j in judges.split(",") if j) if judges is not None else None,
                require=tuple(c for c in require.split(",") if c) if require is not None else None,
                local_judge_model=judge_model.path,
                concurrency=concurrency,
                progress=False,
                sandbox_backend=sandbox_backend,
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
