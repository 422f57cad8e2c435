"""The health stage as KFP components: typed signatures, thin calls into the stage.

Imports live inside the functions (they run in the stage image). ``code_version``
only feeds the cache key. ``health`` judges one iteration: the report of the
previous health step carries the run's history, and this step's report is the
next one's ``previous``. It returns the verdict and the options the next
iteration trains and rolls out with.

Which policy the next iteration starts from is a choice in the graph: the
curriculum branches on the verdict (``dsl.If(verdict == "rollback")`` /
``dsl.Else``), and in each branch ``continue_from`` hands on that branch's
policy (the last healthy one, or the new checkpoint); a ``dsl.OneOf`` over the
two branches is the next iteration's input. Locally the hand-on is a hard link
per file, so it costs no copy.
"""

from typing import NamedTuple, Optional

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.images import CPU_IMAGE

__all__ = ["continue_from", "health"]


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def health(
    code_version: str,
    rollout_metrics: Input[Dataset],
    policy: Input[Model],
    checkpoint: Input[Model],
    report: Output[Artifact],
    metrics: Output[Metrics],
    previous: Optional[Input[Artifact]] = None,  # noqa: UP045 - kfp reads Optional[...]
    train_options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
    rollout_options: dict = None,
    thresholds: dict = None,
    mitigations: dict = None,
) -> NamedTuple(
    "Outputs",
    [
        ("verdict", str),
        ("rollback_iteration", int),
        ("next_train_options", dict),
        ("next_rollout_options", dict),
    ],
):
    """The run's health after an iteration -> its verdict and the next iteration's options.

    Args:
        rollout_metrics: The iteration's rollout metrics (long format); they measure ``policy``.
        policy: The policy the iteration started from (its rollout ran it).
        checkpoint: The iteration's train output (a ``termrl.artifacts.CheckpointFolder``: train
            metrics and the train state inside).
        report: This step's health report: the run so far, each verdict with its reasons.
        metrics: The verdict and the number of findings, for the Kubeflow UI.
        previous: The previous health step's report (the run so far); none for the first iteration.
        train_options: The run's own train options; the verdicts' settings go on top.
        rollout_options: The run's own rollout options; the verdicts' settings go on top.
        thresholds: Overrides of the detectors' thresholds (``Thresholds`` fields).
        mitigations: Overrides of the treatments' strengths (``Mitigations`` fields).

    Returns:
        verdict: healthy, mitigate or rollback (the curriculum branches on it).
        rollback_iteration: rollback: the iteration whose checkpoint the run restarts from (−1: the
            starting policy); otherwise the iteration just judged.
        next_train_options: ``train_options`` with every train setting the verdicts made.
        next_rollout_options: ``rollout_options`` with every rollout setting (penalties, quarantine).
    """
    import json
    import pathlib
    from collections import namedtuple

    from components.health.config import HealthConfig
    from components.health.detectors import Thresholds
    from components.health.stage import headline_metrics, main, next_iteration
    from components.health.verdict import Mitigations
    from termrl.settings import build_config

    result = main(
        HealthConfig(
            rollout_metrics=[pathlib.Path(rollout_metrics.path)],
            train=[pathlib.Path(checkpoint.path)],
            previous=pathlib.Path(previous.path) if previous is not None else None,
            out=pathlib.Path(report.path),
            start_policy=policy.path,
            thresholds=build_config(Thresholds, {}, thresholds),
            mitigations=build_config(Mitigations, {}, mitigations),
        )
    )
    values = headline_metrics(result)
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
    outputs = namedtuple(
        "Outputs", ["verdict", "rollback_iteration", "next_train_options", "next_rollout_options"]
    )
    return outputs(*next_iteration(result, train_options or {}, rollout_options or {}))


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def continue_from(
    code_version: str,
    policy: Input[Model],
    fallback: Input[Model],
    next_policy: Output[Model],
    next_fallback: Output[Model],
) -> None:
    """Hand on the policy the next iteration starts from, and its rollback target.

    The curriculum runs one of two per iteration, on the health verdict: after a
    rollback ``policy`` and ``fallback`` are both the last healthy policy; otherwise
    ``policy`` is the new checkpoint and ``fallback`` the policy the iteration's
    rollout just measured without a collapse.

    Args:
        policy: The policy the next iteration starts from.
        fallback: The policy a later rollback returns to.
        next_policy: ``policy``, handed on (hard links: no copy).
        next_fallback: ``fallback``, handed on.
    """
    from termrl.llm.models import place_model

    place_model(policy.path, next_policy.path)
    place_model(fallback.path, next_fallback.path)
