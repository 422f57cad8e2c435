"""The synthesize stage as a KFP component: a typed signature, one call into the stage.

The body runs inside the stage image (or, with kfp's local runner, a subprocess of
this venv), so every import is inside the function. ``code_version`` is unused by
the body: it is part of the cache key, so new code never reuses old outputs. Lists
are comma-separated strings (a pipeline parameter cannot be a tuple). A parameter
left unset (None) takes ``SynthesizeConfig``'s default; the ``Args:`` the docstring
leaves out come from its field docs (``components.params``).
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output

from components.images import CPU_IMAGE
from components.params import described
from components.synthesize.config import SynthesizeConfig

__all__ = ["synthesize"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
@described(SynthesizeConfig)
def synthesize(
    code_version: str,
    tasks: Output[Dataset],
    metrics: Output[Metrics],
    count: Optional[int] = None,
    seed: Optional[int] = None,
    families: Optional[str] = None,
    exclude_families: Optional[str] = None,
    extra_families: Optional[str] = None,
    extra_count: Optional[int] = None,
    avoid: Optional[Input[Dataset]] = None,
    difficulties: Optional[str] = None,
    perturbation_rate: Optional[float] = None,
    llm_model: Optional[str] = None,
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Procedural (and optionally LLM-written) terminal tasks -> a tasks artifact.

    Args:
        tasks: The tasks artifact written.
        metrics: Tasks written, for the Kubeflow UI.
        families: Comma-separated families to draw from; '' (or unset) draws from all.
        exclude_families: Comma-separated families left out (the held-out families).
        extra_families: Comma-separated families drawn apart, extra_count tasks from them.
        avoid: A tasks artifact whose tasks (and near-duplicates of them) are never produced.
        difficulties: Comma-separated difficulty levels; '' (or unset): the config's, all.
        llm_model: A litellm model that also writes tasks; '' (or unset): none.
        options: Any other SynthesizeConfig field (JSON values); wins over the parameters above.
    """
    import json
    import pathlib

    from components.synthesize.config import SynthesizeConfig
    from components.synthesize.stage import main
    from termrl.artifacts import read_tasks
    from termrl.settings import build_config

    def listed(text: Optional[str]) -> Optional[tuple]:
        return tuple(v for v in text.split(",") if v) if text else None  # '' is unset too

    main(
        build_config(
            SynthesizeConfig,
            dict(
                out=tasks.path,
                count=count,
                seed=seed,
                perturbation_rate=perturbation_rate,
                families=listed(families),
                llm_model=llm_model or None,
                exclude_families=listed(exclude_families),
                extra_families=listed(extra_families),
                extra_count=extra_count,
                avoid=avoid.path if avoid is not None else None,
                difficulties=listed(difficulties),
                progress=False,
            ),
            options,
        )
    )
    values = {"synthesize/tasks": float(read_tasks(tasks.path).num_rows)}
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
