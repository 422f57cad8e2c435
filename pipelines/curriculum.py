"""The curriculum pipeline (KFP v2): imitation, then positive-only RL, then full-signal RL.

    prepare-model ─┬──────────────────────────────────────────────────────────► eval · base ──────┐
    synthesize ─► verify ─► curate ─┬─ imitation pool ─► demonstrate ─► train (imitation) ─► eval ─┤
       (training families)          │                         │ expert trajectories (IL term)      │
                                    ├─ phase-1 pool ─► demonstrate ─┐ (anchors)                    │
                                    │   [rollout (anchored) ─► train (IL + positive-only RL)       │
                                    │                      ─► health] × N             ─► eval ─────┤
                                    └─ expert pool ─► [rollout ─► train (full signal) ─► health] × M
                                                                           ─► eval · final ────────┤
    synthesize ─► verify (held-out tasks: other seeds, plus the held-out family) ────────────────►┴► compare

Phase 1 starts from demonstrations: each task's golden solution replayed as
agent turns (the demonstrate stage). An imitation step trains on the
imitation pool's demonstrations alone (the policy earns no reward before it).
Each phase-1 round then rolls out on the other training tasks, which the
policy was never shown (on imitated tasks every episode succeeds, and a group
of equal rewards carries no signal), with chunk-initialized resampling
(groups start at anchors inside those tasks' demonstrations), and trains on
λ_IL · imitation + positive-only IPA, λ_IL = il_weight · il_decay ** round.
Phase 2 trains on full signal on the expert pool (taken from the phase-1
pool). After every round a health step (``components/health``) reads the
round's rollout and train metrics: healthy, mitigate (the next rounds get
settings such as tighter clipping, a length mask or a lower learning rate) or
roll back (the next round starts again from the last policy a rollout measured
without a collapse, with culprit tasks quarantined: a ``dsl.If``/``dsl.Else`` on
the verdict, ``branch_on_verdict``); the report shows each
verdict with its reasons. Every policy is evaluated on the same held-out tasks (greedy
decoding), and the compare step reports each pass rate with its interval and
the paired difference vs base; the held-out family is never trained on.

The iteration counts N and M shape the graph, so they are compile-time choices
(``CurriculumShape``); everything a run may change is a pipeline parameter with
a default. Every stage takes ``code_version`` (part of each cache key), is
cached, and carries a display name and resource requests; the stages that talk
to sandboxes retry on failure; rollout and train (and eval) request the
accelerator named by the ``accelerator_type``/``accelerator_count`` parameters.
Optional Kubernetes settings (``kfp-kubernetes``): a PVC mounted as the model
cache (``TERMRL_CACHE``), API keys from a secret as environment variables,
image pull secrets on every task, and tolerations and node selectors that put
rollout, train and eval on GPU nodes.

The parameter defaults are sized for ``termrl run`` on a small CPU-only machine
(SmolLM2-135M): 72 easy procedural training tasks (at 48 the final policy passed 60 %
of the held-out tasks and the RL rounds added 4 points over imitation alone; at 72, 76 %
and 8 points: more distinct tasks per family, in both the imitation and the RL pools),
16 groups of 4 episodes of 3 turns of at most 128 tokens, 28 held-out tasks. Phase 1
samples at temperature 0.7 (at 1.0 the imitated policy solved 6 % of unseen training
tasks, at 0.7 16 %: more groups with a success to learn from); phase 2 at 1.0, because after phase 1 the policy at 0.7 solves a
task in all four episodes or in none (run 11's cache: 1 of 16 phase-2 groups had
differing rewards at 0.7, 8 of 16 at 1.0), and its pool holds 16 tasks, one per group.
16 groups rather than 8 because this policy's success on a task is close to all or
nothing: with 8, phase 1's rollout had no group with differing rewards and so no RL
loss. Raise them on a cluster.
"""

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from kfp import dsl, kubernetes
from kfp.dsl.base_component import BaseComponent
from kfp.dsl.pipeline_task import PipelineTask

from components.demonstrate.component import demonstrate
from components.eval.component import evaluate
from components.health.component import continue_from, health
from components.images import CPU_IMAGE, GPU_IMAGE
from components.rollout.component import rollout
from components.synthesize.component import synthesize
from components.train.component import train
from components.verify.component import verify
from pipelines.glue_components import compare, curate, prepare_model
from pipelines.placement import Toleration, label_problems
from termrl.errors import ConfigError

__all__ = [
    "EVAL_BASE",
    "EVAL_FINAL",
    "EVAL_IMITATION",
    "EVAL_PHASE1",
    "REPORT",
    "RESOURCES",
    "RETRIED",
    "CurriculumShape",
    "Ops",
    "apply_platform",
    "branch_on_verdict",
    "build_curriculum",
    "make_ops",
]

EVAL_BASE = "eval · base policy"
EVAL_IMITATION = "eval · after imitation"
EVAL_PHASE1 = "eval · after phase 1"
EVAL_FINAL = "eval · final policy"
REPORT = "report · policies"
"""Display names the local runner's summary looks up."""

RESOURCES = {
    # stage: (cpu request, memory request, memory limit). Sized for SmolLM2-class policies on
    # one node; a larger policy needs more memory for train (weights + Adam state).
    "prepare_model": ("1", "4Gi", "8Gi"),
    "synthesize": ("1", "2Gi", "4Gi"),
    "verify": ("2", "4Gi", "8Gi"),
    "curate": ("1", "1Gi", "2Gi"),
    "demonstrate": ("2", "4Gi", "8Gi"),
    "rollout": ("4", "16Gi", "32Gi"),
    "train": ("4", "16Gi", "32Gi"),
    "evaluate": ("4", "16Gi", "32Gi"),
    "compare": ("1", "2Gi", "4Gi"),
    "health": ("1", "1Gi", "2Gi"),
    "continue_from": ("1", "1Gi", "2Gi"),
}

RETRIED = {"verify": 2, "demonstrate": 2, "rollout": 2, "evaluate": 2, "train": 1}
"""Retries per stage. Sandbox stages fail transiently (a node loses its sandboxes, a
build times out) and rollout resumes from the episodes already written; a train
retry (a pre-empted node) resumes from its last step checkpoint (``components.progress``)."""

GPU_STAGES = ("rollout", "train", "evaluate")
SECRET_STAGES = ("synthesize", "verify", "evaluate")
"""Stages that may call API models (LLM task writers, judges, API policies)."""


@dataclass(frozen=True)
class CurriculumShape:
    """Compile-time choices: the graph's shape, the images and the Kubernetes extras."""

    phase1_iterations: int = 1
    """N: rollout → train rounds, positive-only, on the synthetic pool."""
    phase2_iterations: int = 1
    """M: rollout → train rounds, full signal, on the high-quality pool."""
    cpu_image: str = CPU_IMAGE
    """Image of the CPU stages (synthesize, verify, curate, compare, prepare-model)."""
    gpu_image: str = GPU_IMAGE
    """Image of rollout, train and eval (vLLM, DeepSpeed); the CPU image works on CPU nodes."""
    code_version: str = "dev"
    """Default of the ``code_version`` parameter (``termrl compile`` puts the source hash here)."""
    model_cache_pvc: str = ""
    """A PVC mounted at ``model_cache_path`` in every stage; TERMRL_CACHE points there."""
    model_cache_path: str = "/var/cache/termrl"
    api_key_secret: str = ""
    """A Kubernetes secret whose keys become environment variables of the API-calling stages."""
    api_key_env: tuple[str, ...] = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    """Secret keys exposed (each under its own name)."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (type dockerconfigjson) every stage's pod pulls its image with: a private registry."""
    gpu_tolerations: tuple[Toleration, ...] = ()
    """Taints of the GPU nodes that rollout, train and eval tolerate."""
    gpu_node_selector: tuple[tuple[str, str], ...] = ()
    """(label, value) pairs a node must carry to run rollout, train and eval."""
    sandbox_backend: str = "podman"
    """Default of the ``sandbox_backend`` parameter: podman for ``termrl run``, kubernetes on a cluster."""
    sandbox_registry: str = ""
    """Default of ``sandbox_registry``: where the kubernetes backend pulls task environments from."""
    sandbox_pull_secret: str = ""
    """Default of ``sandbox_pull_secret``: the sandbox pods' image pull secret."""

    def validate(self) -> None:
        problems = []
        if self.phase1_iterations < 0 or self.phase2_iterations < 0:
            problems.append("phase1_iterations and phase2_iterations must be >= 0")
        if self.phase1_iterations + self.phase2_iterations < 1:
            problems.append("the curriculum needs at least one rollout -> train iteration")
        if self.api_key_secret and not self.api_key_env:
            problems.append("api_key_secret is set but api_key_env names no key")
        for toleration in self.gpu_tolerations:
            problems += toleration.problems()
        for label, value in self.gpu_node_selector:
            problems += label_problems(label, value, f"node selector {label}={value}")
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class Ops:
    """The components, with this shape's images."""

    prepare_model: BaseComponent
    synthesize: BaseComponent
    verify: BaseComponent
    curate: BaseComponent
    demonstrate: BaseComponent
    rollout: BaseComponent
    train: BaseComponent
    evaluate: BaseComponent
    compare: BaseComponent
    health: BaseComponent
    continue_from: BaseComponent
    by_name: dict[str, BaseComponent] = field(default_factory=dict)


def _with_image(component: BaseComponent, image: str) -> BaseComponent:
    """A copy of ``component`` that runs in ``image`` (images are a compile-time choice)."""
    clone = copy.deepcopy(component)
    clone.component_spec.implementation.container.image = image
    return clone


def make_ops(cpu_image: str = CPU_IMAGE, gpu_image: str = GPU_IMAGE) -> Ops:
    """Every component of the curriculum with the given images."""
    cpu = {
        "prepare_model": prepare_model,
        "synthesize": synthesize,
        "verify": verify,
        "curate": curate,
        "demonstrate": demonstrate,
        "compare": compare,
        "health": health,
        "continue_from": continue_from,
    }
    gpu = {"rollout": rollout, "train": train, "evaluate": evaluate}
    by_name = {name: _with_image(op, cpu_image) for name, op in cpu.items()}
    by_name.update({name: _with_image(op, gpu_image) for name, op in gpu.items()})
    return Ops(**by_name, by_name=by_name)


def apply_platform(
    task: PipelineTask,
    stage: str,
    display_name: str,
    shape: CurriculumShape,
    accelerator: tuple[object, object] | None = None,
    *,
    caching: bool = True,
) -> PipelineTask:
    """Display name, caching, resources, retries, accelerator and Kubernetes extras of one task."""
    cpu, memory, memory_limit = RESOURCES[stage]
    task.set_display_name(display_name).set_caching_options(caching)
    task.set_cpu_request(cpu).set_memory_request(memory).set_memory_limit(memory_limit)
    if stage in RETRIED:
        task.set_retry(
            RETRIED[stage], backoff_duration="30s", backoff_factor=2.0, backoff_max_duration="600s"
        )
    if stage in GPU_STAGES:
        if accelerator is not None:
            task.set_accelerator_type(accelerator[0]).set_accelerator_limit(accelerator[1])
        for toleration in shape.gpu_tolerations:
            kubernetes.add_toleration(
                task,
                key=toleration.key,
                operator=toleration.operator,
                value=toleration.value or None,
                effect=toleration.effect or None,
            )
        for label, value in shape.gpu_node_selector:
            kubernetes.add_node_selector(task, label_key=label, label_value=value)
    if shape.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(shape.image_pull_secrets))
    if shape.model_cache_pvc:
        kubernetes.mount_pvc(
            task, pvc_name=shape.model_cache_pvc, mount_path=shape.model_cache_path
        )
        task.set_env_variable("TERMRL_CACHE", shape.model_cache_path)
    if shape.api_key_secret and stage in SECRET_STAGES:
        kubernetes.use_secret_as_env(
            task,
            secret_name=shape.api_key_secret,
            secret_key_to_env={k: k for k in shape.api_key_env},
        )
    return task


def branch_on_verdict(
    continue_from: Callable[..., PipelineTask],
    place: Callable[[PipelineTask, str, str], PipelineTask],
    verdict: object,
    *,
    checkpoint: object,
    policy: object,
    fallback: object,
    names: tuple[str, str],
) -> tuple[object, object]:
    """The next round's policy and rollback target: a ``dsl.If``/``dsl.Else`` on a health verdict.

    On ``rollback`` both are ``fallback``, the last policy a rollout measured without a collapse;
    otherwise the round's new ``checkpoint``, and ``policy``, the one its rollout just measured.
    Each branch runs ``continue_from`` (which takes ``policy`` and ``fallback`` and hands them on);
    the results are ``dsl.OneOf`` the two branches' outputs. ``names``: the two tasks' display
    names (roll back, go on).
    """
    with dsl.If(verdict == "rollback", name="rollback"):
        back = place(continue_from(policy=fallback, fallback=fallback), "continue_from", names[0])
    with dsl.Else(name="go on"):
        on = place(continue_from(policy=checkpoint, fallback=policy), "continue_from", names[1])
    return (
        dsl.OneOf(back.outputs["next_policy"], on.outputs["next_policy"]),
        dsl.OneOf(back.outputs["next_fallback"], on.outputs["next_fallback"]),
    )


def build_curriculum(shape: CurriculumShape | None = None) -> Callable[..., object]:
    """The curriculum pipeline for ``shape`` (a ``@dsl.pipeline`` function, ready to compile or run)."""
    shape = shape or CurriculumShape()
    shape.validate()
    ops = make_ops(shape.cpu_image, shape.gpu_image)
    n1, n2 = shape.phase1_iterations, shape.phase2_iterations

    @dsl.pipeline(
        name="termrl-curriculum",
        description="synthesize → verify → demonstrate → imitation → anchored positive-only rollout/train × N "
        "→ full-signal rollout/train × M → eval of every policy on held-out tasks",
    )
    def curriculum(
        code_version: str = shape.code_version,
        base_model: str = "",
        synth_count: int = 72,
        synth_seed: int = 0,
        synth_families: str = "",
        synth_difficulties: str = "easy",
        synth_llm_model: str = "",
        heldout_count: int = 28,
        heldout_seed: int = 1000,
        heldout_families: str = "sql-sqlite",
        verify_repeats: int = 1,
        verify_judges: str = "",
        expert_tasks: str = "",
        imitation_fraction: float = 0.5,
        expert_count: int = 16,
        prompt_style: str = "compact",
        imitation_epochs: int = 3,
        imitation_learning_rate: float = 1e-4,
        il_weight: float = 1.0,
        il_decay: float = 0.5,
        rl_weight: float = 1.0,
        anchoring: str = "parallel",
        group_size: int = 4,
        groups: int = 16,
        dynamic_sampling: int = 0,
        rollout_concurrency: int = 8,
        max_turns: int = 3,
        max_new_tokens: int = 128,
        rollout_temperature: float = 0.7,
        phase2_temperature: float = 1.0,
        finetune: str = "full",
        learning_rate: float = 1e-5,
        train_epochs: int = 1,
        eval_trials: int = 1,
        eval_max_turns: int = 3,
        eval_concurrency: int = 8,
        sandbox_backend: str = shape.sandbox_backend,
        sandbox_namespace: str = "",
        sandbox_registry: str = shape.sandbox_registry,
        sandbox_pull_secret: str = shape.sandbox_pull_secret,
        accelerator_type: str = "nvidia.com/gpu",
        accelerator_count: int = 1,
        synthesize_options: dict = {},  # noqa: B006 - kfp reads the default; never mutated
        verify_options: dict = {},  # noqa: B006
        rollout_options: dict = {},  # noqa: B006
        train_options: dict = {},  # noqa: B006
        eval_options: dict = {},  # noqa: B006
        health_thresholds: dict = {},  # noqa: B006
    ) -> None:
        """The curriculum.

        Args:
            base_model: The starting policy (a model folder); '' is the embedded SmolLM2-135M.
            synth_count: Procedural tasks synthesized for training (before verification).
            heldout_count: Held-out tasks synthesized for evaluation (other seeds).
            heldout_families: Comma-separated families left out of training; they appear only among
                the held-out tasks, to show how far learning reaches.
            prompt_style: The agent's system prompt (compact or hermes), the same in every stage.
            imitation_fraction: Share of each family's admitted tasks whose demonstrations the
                imitation step trains on; phase 1 learns on the other tasks.
            imitation_epochs: Epochs of the imitation step over the demonstrations.
            il_weight: λ_IL of the RL rounds: λ_IL = il_weight · il_decay ** round (round 1, 2, ...);
                0 drops the imitation term there (the imitation step itself always imitates).
            rl_weight: Weight of the RL (IPA) term; 0 keeps only imitation (the imitation-only ablation).
            anchoring: Phase-1 resampling: none, parallel or rollback.
            dynamic_sampling: Extra groups each RL rollout may start to replace groups whose
                episodes all earned the same reward (no signal); 0 keeps the first complete groups.
            rollout_temperature: Phase 1's sampling temperature; its train steps take log πθ at it.
            phase2_temperature: Phase 2's sampling temperature (rollout and train). Higher than
                phase 1's: after phase 1 the policy solves a task in every episode or in none at
                0.7, and a group of equal rewards carries no signal.
            expert_count: Size of the phase-2 pool (the phase-1 tasks with the lowest
                false-positive risk); at least ``groups``, so no phase-2 group repeats a task.
            learning_rate: Learning rate of the RL train steps.
            sandbox_backend: Where verify, demonstrate, rollout and eval run task sandboxes: podman
                (a local run) or kubernetes (a pod per sandbox, in sandbox_namespace).
            sandbox_namespace: kubernetes: namespace of the sandbox pods ('' = termrl-sandboxes, what
                `termrl cluster manifests` sets up).
            sandbox_registry: kubernetes: registry of the task environment images, REG/termrl/env:<hash>,
                pushed by `termrl images push-tasks` before the run.
            sandbox_pull_secret: kubernetes: image pull secret (in the sandbox namespace) of the sandbox pods.
            synthesize_options: Any SynthesizeConfig field, for both synthesize stages
                (``termrl run --set synthesize.FIELD=VALUE``).
            verify_options: Any VerifyConfig field, for both verify stages.
            rollout_options: Any RolloutConfig field, for every RL rollout.
            train_options: Any TrainConfig field, for every train stage (the imitation step too),
                e.g. negative_weight or eps_high; a field set here wins over the parameters above.
            eval_options: Any EvalConfig field, for every eval.
            health_thresholds: Overrides of the health check's detector thresholds
                (``components.health.detectors.Thresholds`` fields).
        """
        accel = (accelerator_type, accelerator_count)
        sandbox = {
            "sandbox_namespace": sandbox_namespace,
            "sandbox_registry": sandbox_registry,
            "sandbox_pull_secret": sandbox_pull_secret,
        }

        def place(task: PipelineTask, stage: str, name: str) -> PipelineTask:
            return apply_platform(task, stage, name, shape, accel)

        base = place(
            ops.prepare_model(code_version=code_version, source=base_model),
            "prepare_model",
            "prepare base policy",
        )

        def verified_tasks(count: int, seed: int, exclude: str, which: str) -> PipelineTask:
            """Synthesize ``count`` tasks from ``seed`` and verify them: the verify task."""
            tasks = place(
                ops.synthesize(
                    code_version=code_version,
                    count=count,
                    seed=seed,
                    families=synth_families,
                    exclude_families=exclude,
                    difficulties=synth_difficulties,
                    llm_model=synth_llm_model,
                    options=synthesize_options,
                ),
                "synthesize",
                f"synthesize {which} tasks",
            )
            return place(
                ops.verify(
                    code_version=code_version,
                    tasks=tasks.outputs["tasks"],
                    judge_model=base.outputs["model"],
                    repeats=verify_repeats,
                    judges=verify_judges,
                    sandbox_backend=sandbox_backend,
                    **sandbox,
                    options=verify_options,
                ),
                "verify",
                f"verify {which} tasks",
            )

        verified = verified_tasks(synth_count, synth_seed, heldout_families, "training")
        pools = place(
            ops.curate(
                code_version=code_version,
                admitted=verified.outputs["admitted"],
                verdicts=verified.outputs["verdicts"],
                imitation_fraction=imitation_fraction,
                expert_tasks=expert_tasks,
                expert_count=expert_count,
                seed=synth_seed,
            ),
            "curate",
            "curate pools",
        )
        # Other seeds, every family: the held-out families appear only here.
        heldout = verified_tasks(heldout_count, heldout_seed, "", "held-out").outputs["admitted"]

        def demonstrate(pool: str, name: str) -> object:
            return place(
                ops.demonstrate(
                    code_version=code_version,
                    tasks=pools.outputs[pool],
                    policy=base.outputs["model"],
                    prompt_style=prompt_style,
                    sandbox_backend=sandbox_backend,
                    **sandbox,
                ),
                "demonstrate",
                name,
            ).outputs["demonstrations"]

        demos = demonstrate("imitation_pool", "demonstrate · imitation pool")
        anchors = demonstrate("train_pool", "demonstrate · phase-1 pool") if n1 else None

        def evaluate(policy: object, label: str, name: str) -> PipelineTask:
            return place(
                ops.evaluate(
                    code_version=code_version,
                    tasks=heldout,
                    policy=policy,
                    run_id=label,
                    trials=eval_trials,
                    max_turns=eval_max_turns,
                    max_new_tokens=max_new_tokens,
                    concurrency=eval_concurrency,
                    sandbox_backend=sandbox_backend,
                    prompt_style=prompt_style,
                    options=eval_options,
                    **sandbox,
                ),
                "evaluate",
                name,
            )

        evals = {"base": evaluate(base.outputs["model"], "base", EVAL_BASE)}
        imitation = place(
            ops.train(
                code_version=code_version,
                trajectories=demos,
                policy=base.outputs["model"],
                mode="positive-only",
                finetune=finetune,
                learning_rate=imitation_learning_rate,
                epochs=imitation_epochs,
                seed=0,
                il_weight=1.0,
                iteration=0,  # imitation alone, whatever the RL rounds mix
                options=train_options,
            ),
            "train",
            "imitation · train on demonstrations",
        )
        policy = imitation.outputs["checkpoint"]
        evals["imitation"] = evaluate(policy, "imitation", EVAL_IMITATION)

        schedule = [(1, i, n1, "positive-only", "train_pool") for i in range(1, n1 + 1)]
        schedule += [(2, j, n2, "full", "expert_pool") for j in range(1, n2 + 1)]
        # The health step after each round returns its verdict and the next round's options (the
        # run's, plus every mitigation so far). The next round's policy is a branch on the verdict:
        # after a rollback, the last policy a rollout measured without a collapse; otherwise the
        # new checkpoint (which becomes the rollback target once the next rollout has measured it).
        fallback, report = policy, None
        rollout_opts, train_opts = rollout_options, train_options
        for version, (phase, i, total, mode, pool) in enumerate(schedule, start=1):
            # Phase 1 learns on tasks the imitation step never saw, starting groups inside their
            # demonstrations; the imitation term keeps training on the imitation pool's.
            anchored = {"demonstrations": anchors, "anchoring": anchoring} if phase == 1 else {}
            temperature = rollout_temperature if phase == 1 else phase2_temperature
            rolled = place(
                ops.rollout(
                    code_version=code_version,
                    tasks=pools.outputs[pool],
                    policy=policy,
                    policy_version=version,
                    seed=version,
                    group_size=group_size,
                    groups=groups,
                    redundancy=0,  # no spare group on CPU (termrl.presets.CURRICULUM_CPU)
                    dynamic_sampling=dynamic_sampling,
                    concurrency=rollout_concurrency,
                    max_turns=max_turns,
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    sandbox_backend=sandbox_backend,
                    prompt_style=prompt_style,
                    **sandbox,
                    options=rollout_opts,
                    **anchored,
                ),
                "rollout",
                f"phase {phase} · rollout {i}/{total}",
            )
            imitating = {"demonstrations": demos} if phase == 1 else {}
            trained = place(
                ops.train(
                    code_version=code_version,
                    trajectories=rolled.outputs["trajectories"],
                    policy=policy,
                    mode=mode,
                    finetune=finetune,
                    learning_rate=learning_rate,
                    epochs=train_epochs,
                    seed=version,
                    rl_weight=rl_weight,
                    il_weight=il_weight,
                    il_decay=il_decay,
                    iteration=version,  # the sampling temperature: read from the trajectories
                    options=train_opts,
                    **imitating,
                ),
                "train",
                f"phase {phase} · train {i}/{total} ({mode})",
            )
            checked = place(
                ops.health(
                    code_version=code_version,
                    rollout_metrics=rolled.outputs["rollout_metrics"],
                    policy=policy,
                    checkpoint=trained.outputs["checkpoint"],
                    train_options=train_opts,
                    rollout_options=rollout_opts,
                    thresholds=health_thresholds,
                    **({"previous": report} if report is not None else {}),
                ),
                "health",
                f"phase {phase} · health {i}/{total}",
            )
            policy, fallback = branch_on_verdict(
                functools.partial(ops.continue_from, code_version=code_version),
                place,
                checked.outputs["verdict"],
                checkpoint=trained.outputs["checkpoint"],
                policy=policy,
                fallback=fallback,
                names=(
                    f"phase {phase} · roll back {i}/{total}",
                    f"phase {phase} · go on {i}/{total}",
                ),
            )
            report = checked.outputs["report"]
            train_opts, rollout_opts = (
                checked.outputs["next_train_options"],
                checked.outputs["next_rollout_options"],
            )
            if phase == 1 and i == n1 and n2 > 0:  # with no phase 2, "final" is this policy
                evals["phase1"] = evaluate(policy, "phase1", EVAL_PHASE1)

        evals["final"] = evaluate(policy, "final", EVAL_FINAL)
        later = {
            f"{label}_results": evals[label].outputs["results"]
            for label in ("imitation", "phase1", "final")
            if label in evals
        }
        place(
            ops.compare(
                code_version=code_version,
                base_results=evals["base"].outputs["results"],
                heldout_families=heldout_families,
                health=report,
                **later,
            ),
            "compare",
            REPORT,
        )

    return curriculum
