"""The nightly eval pipeline: one policy on a fixed set of freshly verified tasks.

    prepare-model ──────────────────────────────► eval · nightly
    synthesize (fixed seed) ─► verify ─► admitted ──┘

Scheduled as a KFP recurring run or an Argo CronWorkflow (``pipelines.schedule``);
both take their parameters from ``NightlyParams``, so they run with the same
settings. The policy is copied and evaluated afresh every night (no caching: the folder
behind ``model`` may hold a newer checkpoint, and a cached eval measures
nothing); the tasks are cached. The task seed is a parameter with a fixed default, so successive nights measure
the same tasks and a change in pass rate is the policy's (or the harness's),
not the tasks'. ``model`` is a model folder the stage can read (for example on
the model-cache PVC); '' evaluates the embedded default policy.
"""

from collections.abc import Callable
from dataclasses import dataclass

from kfp import dsl

from pipelines.parameters import from_shape, own, pipeline_function, stage
from pipelines.presets import NIGHTLY_EVAL as NIGHTLY_PRESET
from pipelines.shape import CurriculumShape, apply_platform, make_ops

__all__ = ["NIGHTLY_EVAL", "NIGHTLY_RUN_ID", "NightlyParams", "build_nightly_eval"]

NIGHTLY_EVAL = "eval · nightly"
NIGHTLY_RUN_ID = "nightly"
"""The eval's run id, in its results and report."""


@dataclass(frozen=True)
class NightlyParams:
    """The nightly eval's parameters (defaults: ``pipelines.parameters``, preset ``NIGHTLY_EVAL``)."""

    code_version: str = from_shape()
    """The stages' code version, part of every cache key."""
    model: str = own("")
    """The policy to evaluate (a model folder the stages can read); '' is the embedded SmolLM2-135M."""
    task_count: int = stage("synthesize.count")
    """Procedural tasks synthesized (before verification)."""
    task_seed: int = stage("synthesize.seed")
    """Seed of the tasks: fixed, so every night measures the same tasks."""
    verify_repeats: int = stage("verify.repeats")
    """Runs of each task's ground truth and no-op in verify."""
    verify_judges: str = stage("verify.judges")
    """Comma-separated LLM judges of each instruction-test pair ('' = none)."""
    trials: int = stage("eval.trials")
    """Trials per task (eval decodes greedily: more trials repeat the first)."""
    max_turns: int = stage("eval.max_turns")
    """Assistant turns per episode."""
    max_new_tokens: int = stage("eval.max_new_tokens")
    """Tokens per assistant turn."""
    sandbox_backend: str = stage("verify.sandbox_backend", "eval.sandbox_backend")
    """Where verify and eval run task sandboxes: podman, or kubernetes (a pod per sandbox)."""
    sandbox_namespace: str = stage("verify.sandbox_namespace", "eval.sandbox_namespace")
    """kubernetes: namespace of the sandbox pods ('' = termrl-sandboxes)."""
    sandbox_registry: str = stage("verify.sandbox_registry", "eval.sandbox_registry")
    """kubernetes: registry of the task environment images (REG/termrl/env:<hash>)."""
    sandbox_pull_secret: str = stage("verify.sandbox_pull_secret", "eval.sandbox_pull_secret")
    """kubernetes: image pull secret (in the sandbox namespace) of the sandbox pods."""
    accelerator_type: str = own("nvidia.com/gpu", platform=True)
    """Accelerator the eval requests."""
    accelerator_count: str = own("1", platform=True)
    """Accelerators the eval requests, a Kubernetes quantity as a string (KFP's driver
    reads the limit as a string: an int parameter set none); "0" asks for none (a zero limit:
    the pods fit on nodes without GPUs, a CPU-only cluster)."""
    eval_options: dict = own({})
    """Any EvalConfig field."""


def build_nightly_eval(shape: CurriculumShape | None = None) -> Callable[..., object]:
    """The nightly eval pipeline with ``shape``'s images and Kubernetes extras (iterations unused)."""
    shape = shape or CurriculumShape()
    ops = make_ops(shape.cpu_image, shape.gpu_image)

    def nightly_eval(p: NightlyParams) -> None:
        accelerator = (p.accelerator_type, p.accelerator_count)

        def place(task: dsl.PipelineTask, stage: str, name: str, caching: bool = True) -> object:
            return apply_platform(task, stage, name, shape, accelerator, caching=caching)

        sandbox = {
            "sandbox_namespace": p.sandbox_namespace,
            "sandbox_registry": p.sandbox_registry,
            "sandbox_pull_secret": p.sandbox_pull_secret,
        }
        policy = ops.prepare_model(code_version=p.code_version, source=p.model)
        place(policy, "prepare_model", "prepare policy", caching=False)
        tasks = ops.synthesize(code_version=p.code_version, count=p.task_count, seed=p.task_seed)
        place(tasks, "synthesize", "synthesize eval tasks")
        verified = ops.verify(
            code_version=p.code_version,
            tasks=tasks.outputs["tasks"],
            judge_model=policy.outputs["model"],
            repeats=p.verify_repeats,
            judges=p.verify_judges,
            sandbox_backend=p.sandbox_backend,
            **sandbox,
        )
        place(verified, "verify", "verify eval tasks")
        evaluated = ops.evaluate(
            code_version=p.code_version,
            tasks=verified.outputs["admitted"],
            policy=policy.outputs["model"],
            run_id=NIGHTLY_RUN_ID,
            trials=p.trials,
            max_turns=p.max_turns,
            max_new_tokens=p.max_new_tokens,
            sandbox_backend=p.sandbox_backend,
            options=p.eval_options,
            **sandbox,
        )
        place(evaluated, "evaluate", NIGHTLY_EVAL, caching=False)

    return dsl.pipeline(
        name="termrl-nightly-eval",
        description="evaluate one policy on a fixed set of verified procedural tasks",
    )(
        pipeline_function(
            NightlyParams,
            nightly_eval,
            name="termrl-nightly-eval",
            summary="The nightly eval.",
            preset=NIGHTLY_PRESET,
            given=shape.given(),
        )
    )
