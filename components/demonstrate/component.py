"""The demonstrate stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The stage insists on a ``.parquet`` file name, which a
KFP output path lacks, so the demonstrations are written beside the artifact
path and moved onto it.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.images import CPU_IMAGE

__all__ = ["demonstrate"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def demonstrate(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    demonstrations: Output[Dataset],
    metrics: Output[Metrics],
    concurrency: int = 4,
    prompt_style: str = "compact",
    backend: str = "podman",
    sandbox_namespace: str = "",
    sandbox_registry: str = "",
    sandbox_pull_secret: str = "",
) -> None:
    """Each task's golden solution replayed as agent turns in a sandbox -> expert trajectories.

    Args:
        tasks: Tasks artifact whose solutions become demonstrations (the train pool).
        policy: The policy whose tokenizer and chat template the demonstrations are written in.
        concurrency: Replays (sandboxes) alive at once.
        prompt_style: The agent's system prompt (compact or hermes); must match rollout and eval.
        backend: Sandbox backend.
        sandbox_namespace: kubernetes backend: namespace of the sandbox pods ('' = termrl-sandboxes).
        sandbox_registry: kubernetes backend: registry of the task environment images.
        sandbox_pull_secret: kubernetes backend: image pull secret of the sandbox pods.
    """
    import json
    import os
    import pathlib
    import shutil

    from components.demonstrate.config import DemonstrateConfig
    from components.demonstrate.stage import main
    from components.progress import progress_folder
    from termrl.agent.loop import AgentConfig

    out = pathlib.Path(demonstrations.path + ".parquet")
    summary = main(
        DemonstrateConfig(
            tasks=pathlib.Path(tasks.path),
            out=out,
            model=policy.path,
            backend=backend,
            concurrency=concurrency,
            agent=AgentConfig(prompt_style=prompt_style),
            progress=False,
            parts=progress_folder("demonstrate", demonstrations.uri),
            sandbox_namespace=sandbox_namespace,
            sandbox_registry=sandbox_registry,
            sandbox_pull_secret=sandbox_pull_secret,
        )
    )
    os.replace(out, demonstrations.path)
    shutil.rmtree(
        progress_folder("demonstrate", demonstrations.uri), ignore_errors=True
    )  # the artifact has it all
    values = {
        "demonstrate/tasks": float(summary.tasks),
        "demonstrate/kept": float(summary.demonstrations),
        "demonstrate/chunks": float(summary.chunks),
        "demonstrate/wall_sec": summary.wall_sec,
    }
    values.update({f"demonstrate/none/{r}": float(n) for r, n in summary.dropped.items()})
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
