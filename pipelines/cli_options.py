"""The options ``termrl compile`` and ``termrl schedule`` share: images, pull secret, GPU placement
and the sandbox backend's cluster settings, and how they become a ``CurriculumShape``'s fields."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from components.images import CPU_IMAGE, GPU_IMAGE
from pipelines.placement import cluster_images, local_images, parse_gpu_placement

__all__ = [
    "PLACEMENT_OPTIONS",
    "TESTED_KFP_BACKEND",
    "placement_fields",
    "placement_options",
    "sandbox_fields",
]

TESTED_KFP_BACKEND = "2.17.0"
"""The KFP backend the compiled output is written for (``termrl compile --kfp-backend-version``):
the first that runs all of it (the artifact ``dsl.OneOf`` fix, kubeflow/pipelines#13436, shipped
in 2.17.0). The SDK that compiles it is pinned to the same minor (pyproject.toml)."""

PLACEMENT_OPTIONS = (
    "registry",
    "cpu_image",
    "gpu_image",
    "image_pull_secrets",
    "gpu_tolerations",
    "gpu_node_selector",
)


def placement_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options that let a cluster pull and place the stages, shared by every command that targets one.

    They reach ``command`` as one dict, ``placement``, which ``placement_fields`` turns into shape fields.
    """

    @functools.wraps(command)
    def with_placement(**kwargs: Any) -> None:
        command(placement={name: kwargs.pop(name) for name in PLACEMENT_OPTIONS}, **kwargs)

    options = [
        click.option(
            "--registry",
            default=None,
            metavar="REG",
            help="Registry the cluster pulls the stage images from: "
            "REG/termrl/stage-cpu:<code version> and REG/termrl/stage-gpu:<code version>.",
        ),
        click.option(
            "--cpu-image",
            default=None,
            help=f"Full name of the CPU stages' image (wins over --registry; {CPU_IMAGE} is local).",
        ),
        click.option(
            "--gpu-image",
            default=None,
            help=f"Full name of the image of rollout, train and eval (wins over --registry; "
            f"{GPU_IMAGE} is local).",
        ),
        click.option(
            "--image-pull-secret",
            "image_pull_secrets",
            multiple=True,
            metavar="NAME",
            help="Secret every stage pulls its image with (a private registry; repeatable).",
        ),
        click.option(
            "--gpu-toleration",
            "gpu_tolerations",
            multiple=True,
            metavar="KEY[=VALUE][:EFFECT]",
            help="Taint of the GPU nodes that rollout, train and eval tolerate (repeatable), e.g. "
            "nvidia.com/gpu:NoSchedule; without VALUE any value (Exists), without EFFECT any effect.",
        ),
        click.option(
            "--gpu-node-selector",
            multiple=True,
            metavar="LABEL=VALUE",
            help="Node label that rollout, train and eval require (repeatable), e.g. "
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.",
        ),
    ]
    for option in reversed(options):
        with_placement = option(with_placement)
    return with_placement


def placement_fields(placement: dict[str, Any], tag: str) -> dict[str, Any]:
    """Shape fields from the placement options; refuses images a cluster cannot pull (one line)."""
    cpu, gpu = cluster_images(
        placement["registry"], placement["cpu_image"], placement["gpu_image"], tag
    )
    if local := local_images([cpu, gpu]):
        raise click.ClickException(
            f"{' and '.join(local)}: a cluster cannot pull a local or unqualified image name; "
            "pass --registry REG or full image names (--cpu-image, --gpu-image)"
        )
    tolerations, node_selector = parse_gpu_placement(
        placement["gpu_tolerations"], placement["gpu_node_selector"]
    )
    return {
        "cpu_image": cpu,
        "gpu_image": gpu,
        "image_pull_secrets": placement["image_pull_secrets"],
        "gpu_tolerations": tolerations,
        "gpu_node_selector": node_selector,
    }


def sandbox_fields(placement: dict[str, Any]) -> dict[str, str]:
    """A cluster's sandboxes: pods (the kubernetes backend) pulling task environments from --registry
    with the first --image-pull-secret; each is a pipeline parameter the UI can change."""
    secrets = placement["image_pull_secrets"]
    return {
        "sandbox_backend": "kubernetes",
        "sandbox_registry": placement["registry"] or "",
        "sandbox_pull_secret": secrets[0] if secrets else "",
    }
