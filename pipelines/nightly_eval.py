"""The nightly eval pipeline: one policy on a fixed set of freshly verified tasks.

    prepare-model ──────────────────────────────► eval · nightly
    synthesize (fixed seed) ─► verify ─► admitted ──┘

Scheduled as a KFP recurring run or an Argo CronWorkflow (``pipelines.schedule``).
The policy is copied and evaluated afresh every night (no caching: the folder
behind ``model`` may hold a newer checkpoint, and a cached eval measures
nothing); the tasks are cached. The task seed is a parameter with a fixed default, so successive nights measure
the same tasks and a change in pass rate is the policy's (or the harness's),
not the tasks'. ``model`` is a model folder the stage can read (for example on
the model-cache PVC); '' evaluates the embedded default policy.
"""

from collections.abc import Callable

from kfp import dsl

from pipelines.curriculum import CurriculumShape, apply_platform, make_ops

__all__ = ["NIGHTLY_EVAL", "build_nightly_eval"]

NIGHTLY_EVAL = "eval · nightly"


def build_nightly_eval(shape: CurriculumShape | None = None) -> Callable[..., object]:
    """The nightly eval pipeline with ``shape``'s images and Kubernetes extras (iterations unused)."""
    shape = shape or CurriculumShape()
    ops = make_ops(shape.cpu_image, shape.gpu_image)

    @dsl.pipeline(
        name="termrl-nightly-eval",
        description="evaluate one policy on a fixed set of verified procedural tasks",
    )
    def nightly_eval(
        code_version: str = shape.code_version,
        model: str = "",
        task_count: int = 12,
        task_seed: int = 1000,
        verify_repeats: int = 1,
        trials: int = 1,  # eval decodes greedily: more trials repeat the first
        max_turns: int = 8,
        max_new_tokens: int = 256,
        sandbox_backend: str = shape.sandbox_backend,
        sandbox_namespace: str = "",
        sandbox_registry: str = shape.sandbox_registry,
        sandbox_pull_secret: str = shape.sandbox_pull_secret,
        accelerator_type: str = "nvidia.com/gpu",
        accelerator_count: int = 1,
        eval_options: dict = {},  # noqa: B006 - kfp reads the default; never mutated
    ) -> None:
        accel = (accelerator_type, accelerator_count)
        sandbox = {
            "sandbox_namespace": sandbox_namespace,
            "sandbox_registry": sandbox_registry,
            "sandbox_pull_secret": sandbox_pull_secret,
        }
        policy = apply_platform(
            ops.prepare_model(code_version=code_version, source=model),
            "prepare_model",
            "prepare policy",
            shape,
            accel,
            caching=False,
        )
        tasks = apply_platform(
            ops.synthesize(code_version=code_version, count=task_count, seed=task_seed),
            "synthesize",
            "synthesize eval tasks",
            shape,
            accel,
        )
        verified = apply_platform(
            ops.verify(
                code_version=code_version,
                tasks=tasks.outputs["tasks"],
                judge_model=policy.outputs["model"],
                repeats=verify_repeats,
                judges="",  # no judges (termrl.presets.NIGHTLY_EVAL)
                sandbox_backend=sandbox_backend,
                **sandbox,
            ),
            "verify",
            "verify eval tasks",
            shape,
            accel,
        )
        apply_platform(
            ops.evaluate(
                code_version=code_version,
                tasks=verified.outputs["admitted"],
                policy=policy.outputs["model"],
                run_id="nightly",
                trials=trials,
                max_turns=max_turns,
                max_new_tokens=max_new_tokens,
                sandbox_backend=sandbox_backend,
                options=eval_options,
                **sandbox,
            ),
            "evaluate",
            NIGHTLY_EVAL,
            shape,
            accel,
            caching=False,
        )

    return nightly_eval
