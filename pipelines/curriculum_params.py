"""The curriculum's run-time parameters: every knob the Kubeflow UI shows, with its doc.

Each field says where its default comes from (``pipelines.parameters``): a stage
config field it sets (``stage("rollout.max_turns")``), the pipeline alone
(``own(...)``) or the shape (``from_shape()``). The values this pipeline
deliberately runs with instead are the ``CPU_CURRICULUM`` preset
(``pipelines.presets``), each with its reason. Inside the pipeline an instance
holds kfp's pipeline channels, one per parameter.
"""

from dataclasses import dataclass

from pipelines.parameters import from_shape, own, stage

__all__ = ["SANDBOX_PARAMETERS", "CurriculumParams"]

SANDBOX_STAGES = ("verify", "demonstrate", "rollout", "eval")
SANDBOX_PARAMETERS = ("sandbox_namespace", "sandbox_registry", "sandbox_pull_secret")
"""Passed under the same name to every stage that runs sandboxes."""


def _sandbox(name: str) -> object:
    return stage(*(f"{s}.{name}" for s in SANDBOX_STAGES))


@dataclass(frozen=True)
class CurriculumParams:
    """The curriculum's parameters, in the order the Kubeflow UI lists them."""

    code_version: str = from_shape()
    """The stages' code version, part of every cache key (``termrl compile`` sets the source hash)."""
    base_model: str = own("")
    """The starting policy (a model folder); '' is the embedded SmolLM2-135M."""
    synth_count: int = stage("synthesize.count")
    """Procedural tasks synthesized for training (before verification)."""
    synth_seed: int = stage("synthesize.seed")
    """Seed of the training tasks."""
    synth_families: str = stage("synthesize.families")
    """Comma-separated families to synthesize ('' = every family)."""
    synth_difficulties: str = stage("synthesize.difficulties")
    """Comma-separated difficulties of the training tasks."""
    synth_llm_model: str = stage("synthesize.llm_model")
    """A litellm model that writes extra tasks ('' = procedural tasks only)."""
    heldout_count: int = stage("synthesize.count")
    """Held-out tasks from the training families (other seeds, no training task nor a
    near-duplicate of one), spread over heldout_difficulties."""
    heldout_seed: int = stage("synthesize.seed")
    """Seed of the held-out tasks (rotate it to measure on other tasks)."""
    heldout_difficulties: str = stage("synthesize.difficulties")
    """Comma-separated difficulties of the held-out tasks; the report gives each its own slice."""
    heldout_families: str = stage("synthesize.exclude_families", "synthesize.extra_families")
    """Comma-separated families left out of training; they appear only among the held-out tasks,
    to show how far learning reaches (rotate them to measure reach on others)."""
    heldout_family_count: int = stage("synthesize.extra_count")
    """Held-out tasks from the heldout_families, apart from heldout_count (spread over them and
    heldout_difficulties)."""
    verify_repeats: int = stage("verify.repeats")
    """Runs of each task's ground truth and no-op in verify."""
    verify_require: str = stage("verify.require")
    """Comma-separated checks a training task must pass in its verify; ablation and the state
    replay (a sandbox per probed step) run only when named."""
    heldout_verify_require: str = stage("verify.require")
    """Comma-separated checks a held-out task must pass in its verify."""
    verify_judges: str = stage("verify.judges")
    """Comma-separated LLM judges of each instruction-test pair ('' = none)."""
    expert_tasks: str = own("")
    """A tasks artifact or a folder of Terminal-Bench tasks for phase 2 ('' picks the expert_count
    best-verified admitted tasks)."""
    imitation_fraction: float = own(0.5)
    """Share of each family's admitted tasks whose demonstrations the imitation step trains on;
    phase 1 learns on the other tasks."""
    expert_count: int = own(16)
    """Size of the phase-2 pool (the phase-1 tasks with the lowest false-positive risk); at least
    ``groups``, so no phase-2 group repeats a task."""
    prompt_style: str = stage(
        "demonstrate.agent.prompt_style", "rollout.prompt_style", "eval.prompt_style"
    )
    """The agent's system prompt (compact or hermes), the same in every stage."""
    demonstrate_every_phrasing: bool = stage("demonstrate.every_phrasing")
    """One demonstration per phrasing a task records (the procedural families ask each task in
    three voices); false: the task's own instruction only."""
    imitation_epochs: int = stage("train.epochs")
    """Epochs of the imitation step over the demonstrations."""
    imitation_learning_rate: float = stage("train.learning_rate")
    """Learning rate of the imitation step."""
    il_weight: float = stage("train.il_weight")
    """λ_IL of the RL rounds: λ_IL = il_weight · il_decay ** round (round 1, 2, ...); 0 drops the
    imitation term there (the imitation step itself always imitates)."""
    il_decay: float = stage("train.il_decay")
    """Decay of λ_IL per RL round."""
    rl_weight: float = stage("train.rl_weight")
    """Weight of the RL (IPA) term; 0 keeps only imitation (the imitation-only ablation)."""
    anchoring: str = stage("rollout.anchoring")
    """Phase-1 resampling: none, parallel or rollback."""
    recoveries_per_task: int = stage("rollout.recoveries_per_task")
    """Phase 1: per task, up to this many failed episodes whose first command erred are replayed
    with the expert's solution after the error, and imitated beside the RL term (0: none)."""
    group_size: int = stage("rollout.group_size")
    """Episodes per group (the advantage baseline)."""
    groups: int = stage("rollout.groups")
    """Groups per RL rollout."""
    redundancy: int = stage("rollout.redundancy")
    """Extra groups each RL rollout starts; the first ``groups`` to complete are kept."""
    dynamic_sampling: int = stage("rollout.dynamic_sampling")
    """Extra groups each RL rollout may start to replace groups whose episodes all earned the
    same reward (no signal); 0 keeps the first complete groups."""
    rollout_concurrency: int = stage("rollout.concurrency")
    """Episodes (sandboxes) of a rollout alive at once."""
    max_turns: int = stage("rollout.max_turns")
    """Assistant turns per rollout episode."""
    max_new_tokens: int = stage("rollout.max_new_tokens", "eval.max_new_tokens")
    """Tokens per assistant turn, in rollouts and evals."""
    rollout_temperature: float = stage("rollout.temperature")
    """Phase 1's sampling temperature (its trajectories record it, and its train steps take
    log πθ at it)."""
    phase2_temperature: float = stage("rollout.temperature")
    """Phase 2's sampling temperature (rollout and train). Higher than phase 1's: after phase 1
    the policy solves a task in every episode or in none at 0.7, and a group of equal rewards
    carries no signal."""
    finetune: str = stage("train.finetune")
    """full or lora, for every train step."""
    learning_rate: float = stage("train.learning_rate")
    """Learning rate of the RL train steps (0 = the train stage's choice for ``finetune``)."""
    train_epochs: int = stage("train.epochs")
    """Epochs of each RL train step over its rollout."""
    eval_trials: int = stage("eval.trials")
    """Trials per held-out task in every eval (eval decodes greedily)."""
    eval_max_turns: int = stage("eval.max_turns")
    """Assistant turns per eval episode."""
    eval_concurrency: int = stage("eval.concurrency")
    """Episodes (sandboxes) of an eval alive at once."""
    sandbox_backend: str = stage(
        "verify.sandbox_backend",
        "demonstrate.sandbox_backend",
        "rollout.sandbox_backend",
        "eval.sandbox_backend",
    )
    """Where verify, demonstrate, rollout and eval run task sandboxes: podman (a local run) or
    kubernetes (a pod per sandbox, in sandbox_namespace)."""
    sandbox_namespace: str = _sandbox("sandbox_namespace")
    """kubernetes: namespace of the sandbox pods ('' = termrl-sandboxes, what `termrl cluster
    manifests` sets up)."""
    sandbox_registry: str = _sandbox("sandbox_registry")
    """kubernetes: registry of the task environment images, REG/termrl/env:<hash>, pushed by
    `termrl images push-tasks` before the run."""
    sandbox_pull_secret: str = _sandbox("sandbox_pull_secret")
    """kubernetes: image pull secret (in the sandbox namespace) of the sandbox pods."""
    accelerator_type: str = own("nvidia.com/gpu", platform=True)
    """Accelerator that rollout, train and eval request."""
    accelerator_count: str = own("1", platform=True)
    """Accelerators each of rollout, train and eval requests, a Kubernetes quantity as a string (KFP's driver
    reads the limit as a string: an int parameter set none); "0" asks for none (a zero limit:
    the pods fit on nodes without GPUs, a CPU-only cluster)."""
    synthesize_options: dict = own({})
    """Any SynthesizeConfig field, for both synthesize stages (``termrl run --set
    synthesize.FIELD=VALUE``)."""
    verify_options: dict = own({})
    """Any VerifyConfig field, for both verify stages."""
    rollout_options: dict = own({})
    """Any RolloutConfig field, for every RL rollout."""
    train_options: dict = own({})
    """Any TrainConfig field, for every train stage (the imitation step too), e.g. negative_weight
    or eps_high; a field set here wins over the parameters above."""
    eval_options: dict = own({})
    """Any EvalConfig field, for every eval."""
    health_thresholds: dict = own({})
    """Overrides of the health check's detector thresholds
    (``components.health.detectors.Thresholds`` fields)."""
