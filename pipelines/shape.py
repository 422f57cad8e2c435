"""How a pipeline is shaped and placed: compile-time choices, the components with their images, and
each task's display name, caching, resources, retries, accelerator and Kubernetes extras.

    CurriculumShape    compile-time choices (iterations, images, Kubernetes extras, parameter defaults
                       only the compiling context knows)
    make_ops(...)      every component, with the shape's images
    apply_platform     one task's placement (RESOURCES, RETRIED, GPU_STAGES, SECRET_STAGES)
"""

import copy
from dataclasses import dataclass, field
from typing import Any

from kfp import kubernetes
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
from pipelines.colocated_component import colocated_round
from pipelines.glue_components import compare, curate, prepare_model
from pipelines.placement import Toleration, label_problems
from termrl.errors import ConfigError

__all__ = [
    "GPU_STAGES",
    "RESOURCES",
    "RETRIED",
    "SECRET_STAGES",
    "CurriculumShape",
    "Ops",
    "apply_platform",
    "make_ops",
]

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
    "colocated_round": ("4", "16Gi", "32Gi"),  # rollout and train in turn, never both at once
    "evaluate": ("4", "16Gi", "32Gi"),
    "compare": ("1", "2Gi", "4Gi"),
    "health": ("1", "1Gi", "2Gi"),
    "continue_from": ("1", "1Gi", "2Gi"),
}

RETRIED = {
    "verify": 2,
    "demonstrate": 2,
    "rollout": 2,
    "evaluate": 2,
    "train": 1,
    "colocated_round": 1,
}
"""Retries per stage. Sandbox stages fail transiently (a node loses its sandboxes, a
build times out) and rollout resumes from the episodes already written; a train
retry (a pre-empted node) resumes from its last step checkpoint (``components.progress``); a
colocated round's retry does both."""

GPU_STAGES = ("rollout", "train", "colocated_round", "evaluate")
SECRET_STAGES = ("synthesize", "verify", "evaluate")
"""Stages that may call API models (LLM task writers, judges, API policies)."""
SANDBOX_STAGES = ("verify", "demonstrate", "rollout", "colocated_round", "evaluate")
"""Stages that start sandboxes: on Kubernetes they name their own pod as the sandboxes' owner."""
OWNER_FIELDS = {
    "POD_NAME": "metadata.name",
    "POD_UID": "metadata.uid",
    "POD_NAMESPACE": "metadata.namespace",
}
"""The downward API's view of a stage's pod (``kubernetes_manifests.StageOwner`` reads it)."""


@dataclass(frozen=True)
class CurriculumShape:
    """Compile-time choices: the graph's shape, the images and the Kubernetes extras."""

    phase1_iterations: int = 1
    """N: rollout → train rounds, positive-only, on the synthetic pool."""
    phase2_iterations: int = 1
    """M: rollout → train rounds, full signal, on the high-quality pool."""
    colocate: bool = False
    """Each RL round's rollout and train in one pod (``pipelines/colocated.py``): one GPU per round,
    handed from the engine to the trainer (vLLM sleeps and wakes), instead of two pods."""
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
    """Secret keys exposed (each under its own name); each is optional: a stage whose model needs a
    key that is missing fails with the provider's own error, not at pod creation."""
    image_pull_secrets: tuple[str, ...] = ()
    """Secrets (type dockerconfigjson) every stage's pod pulls its image with: a private registry."""
    gpu_tolerations: tuple[Toleration, ...] = ()
    """Taints of the GPU nodes that rollout, train and eval tolerate."""
    gpu_node_selector: tuple[tuple[str, str], ...] = ()
    """(label, value) pairs a node must carry to run rollout, train and eval."""
    sandbox_backend: str | None = None
    """Default of the ``sandbox_backend`` parameter: kubernetes on a cluster; None keeps the stage
    configs' (podman, for ``termrl run``)."""
    sandbox_registry: str | None = None
    """Default of ``sandbox_registry``: where the kubernetes backend pulls task environments from."""
    sandbox_pull_secret: str | None = None
    """Default of ``sandbox_pull_secret``: the sandbox pods' image pull secret."""

    def given(self) -> dict[str, Any]:
        """The pipeline parameter defaults this shape gives (``pipelines.parameters``: they win)."""
        sandbox = {
            "sandbox_backend": self.sandbox_backend,
            "sandbox_registry": self.sandbox_registry,
            "sandbox_pull_secret": self.sandbox_pull_secret,
        }
        return {"code_version": self.code_version} | {
            name: value for name, value in sandbox.items() if value is not None
        }

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
    colocated_round: BaseComponent
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
    gpu = {
        "rollout": rollout,
        "train": train,
        "colocated_round": colocated_round,
        "evaluate": evaluate,
    }
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
    if shape.sandbox_backend == "kubernetes" and stage in SANDBOX_STAGES:
        # The sandbox pods get an owner reference to this pod: deleted with it, never leaked.
        for env_name, field_path in OWNER_FIELDS.items():
            kubernetes.use_field_path_as_env(task, env_name=env_name, field_path=field_path)
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
            # Each key may be missing (a cluster with one provider's key only): an absent key
            # leaves its variable unset instead of failing the pod (CreateContainerConfigError).
            optional=True,
        )
    return task
