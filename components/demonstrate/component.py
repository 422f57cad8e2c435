"""The demonstrate stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The stage insists on a ``.parquet`` file name, which a
KFP output path lacks, so the demonstrations are written beside the artifact
path and moved onto it. A parameter left unset (None) takes ``DemonstrateConfig``'s
default; the ``Args:`` the docstring leaves out come from its field docs
(``components.params``).
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.demonstrate.config import DemonstrateConfig
from components.images import CPU_IMAGE
from components.params import described

__all__ = ["demonstrate"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
@described(DemonstrateConfig)
def demonstrate(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    demonstrations: Output[Dataset],
    metrics: Output[Metrics],
    concurrency: Optional[int] = None,
    prompt_style: Optional[str] = None,
    every_phrasing: Optional[bool] = None,
    sandbox_backend: Optional[str] = None,
    sandbox_namespace: Optional[str] = None,
    sandbox_registry: Optional[str] = None,
    sandbox_pull_secret: Optional[str] = None,
) -> None:
    """Each task's golden solution, replayed as agent turns in a sandbox -> expert trajectories.

    Args:
        tasks: Tasks artifact whose solutions become demonstrations (the train pool).
        policy: The policy whose tokenizer and chat template the demonstrations are written in.
        demonstrations: The expert trajectories (a trajectories artifact, ``source = expert``).
        metrics: Tasks, demonstrations kept and why the others were not, for the Kubeflow UI.
        prompt_style: The agent's system prompt (compact or hermes); must match rollout and eval.
            Unset: the agent's default.
        every_phrasing: One demonstration per phrasing a task records (DemonstrateConfig).
    """
    import json
    import os
    import pathlib
    import shutil

    from components.demonstrate.config import DemonstrateConfig
    from components.demonstrate.stage import main
    from components.progress import progress_folder
    from termrl.agent.loop import AgentConfig
    from termrl.settings import build_config

    out = pathlib.Path(demonstrations.path + ".parquet")
    summary = main(
        build_config(
            DemonstrateConfig,
            dict(
                tasks=pathlib.Path(tasks.path),
                out=out,
                model=policy.path,
                concurrency=concurrency,
                every_phrasing=every_phrasing,
                agent=AgentConfig(prompt_style=prompt_style) if prompt_style is not None else None,
                progress=False,
                parts=progress_folder("demonstrate", demonstrations.uri),
                sandbox_backend=sandbox_backend,
                sandbox_namespace=sandbox_namespace,
                sandbox_registry=sandbox_registry,
                sandbox_pull_secret=sandbox_pull_secret,
            ),
            None,
        )
    )
    os.replace(out, demonstrations.path)
    shutil.rmtree(
        progress_folder("demonstrate", demonstrations.uri), ignore_errors=True
    )  # the artifact has it all
    values = {
        "demonstrate/tasks": float(summary.tasks),
        "demonstrate/kept": float(summary.demonstrations),
        "demonstrate/episodes": float(summary.episodes),
        "demonstrate/chunks": float(summary.chunks),
        "demonstrate/wall_sec": summary.wall_sec,
    }
    values.update({f"demonstrate/none/{r}": float(n) for r, n in summary.dropped.items()})
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
