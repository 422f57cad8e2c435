"""The synthesize stage as a KFP component: a typed signature, one call into the stage.

The body runs inside the stage image (or, with kfp's local runner, a subprocess of
this venv), so every import is inside the function. ``code_version`` is unused by
the body: it is part of the cache key, so new code never reuses old outputs.
"""

from kfp import dsl
from kfp.dsl import Dataset, Metrics, Output

from components.images import CPU_IMAGE

__all__ = ["synthesize"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def synthesize(
    code_version: str,
    tasks: Output[Dataset],
    metrics: Output[Metrics],
    count: int = 12,
    seed: int = 0,
    families: str = "",
    exclude_families: str = "",
    difficulties: str = "",
    perturbation_rate: float = 0.3,
    llm_model: str = "",
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Procedural (and optionally LLM-written) tasks -> the tasks artifact."""
    import json
    import pathlib

    from components.synthesize.config import SynthesizeConfig
    from components.synthesize.stage import main
    from termrl.artifacts import read_tasks
    from termrl.settings import build_config

    main(
        build_config(
            SynthesizeConfig,
            dict(
                out=tasks.path,
                count=count,
                seed=seed,
                perturbation_rate=perturbation_rate,
                families=tuple(f for f in families.split(",") if f),
                llm_model=llm_model or None,
                exclude_families=tuple(f for f in exclude_families.split(",") if f),
                progress=False,
                **(
                    {"difficulties": tuple(d for d in difficulties.split(",") if d)}
                    if difficulties
                    else {}
                ),
            ),
            options,
        )
    )
    values = {"synthesize/tasks": float(read_tasks(tasks.path).num_rows)}
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
