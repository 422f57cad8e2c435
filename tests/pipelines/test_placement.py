"""Image names a cluster can pull, and the GPU stages' tolerations and node selectors."""

import pytest

from components.images import CPU_IMAGE, GPU_IMAGE
from pipelines.placement import (
    Toleration,
    cluster_images,
    local_images,
    parse_gpu_placement,
    parse_node_selector,
    registry_image,
)
from termrl.errors import ConfigError


def test_registry_names_keep_the_repository_path_and_take_the_code_version_as_tag():
    assert (
        registry_image("reg.example.com/team/", CPU_IMAGE, "src-0123456789ab")
        == "reg.example.com/team/termrl/stage-cpu:src-0123456789ab"
    )
    assert cluster_images("localhost:5000", None, None, "v1") == (
        "localhost:5000/termrl/stage-cpu:v1",
        "localhost:5000/termrl/stage-gpu:v1",
    )
    # a full name wins over the registry; nothing given keeps the local names (termrl run's)
    assert cluster_images("r.io", None, "other.io/gpu:7", "v1") == (
        "r.io/termrl/stage-cpu:v1",
        "other.io/gpu:7",
    )
    assert cluster_images(None, None, None, "v1") == (CPU_IMAGE, GPU_IMAGE)
    with pytest.raises(ConfigError, match="image tag"):
        registry_image("r.io", CPU_IMAGE, "v1+local")


def test_local_and_unqualified_names_are_the_ones_a_cluster_cannot_pull():
    names = [
        "localhost/termrl/stage-cpu:latest",
        "termrl/stage-cpu:1",
        "ubuntu",
        "localhost:5000/termrl/x:1",
        "reg.example.com/termrl/stage-gpu:1",
        "gcr.io/p/i@sha256:" + "0" * 64,
    ]
    assert local_images(names) == names[:3]


def test_toleration_forms():
    assert Toleration.parse("nvidia.com/gpu:NoSchedule").manifest() == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert Toleration.parse("dedicated=gpu:NoExecute").manifest() == {
        "key": "dedicated",
        "operator": "Equal",
        "value": "gpu",
        "effect": "NoExecute",
    }
    assert Toleration.parse("nvidia.com/gpu").manifest() == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
    }
    assert str(Toleration.parse("dedicated=gpu:NoExecute")) == "dedicated=gpu:NoExecute"


def test_placement_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as caught:
        parse_gpu_placement(["gpu:NoSchedul", "a b"], ["pool", "zone=a", "zone=b", "ok=no/slash"])
    assert len(caught.value.problems) == 5, caught.value.problems
    assert parse_node_selector(["nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "pool="]) == (
        ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
        ("pool", ""),
    )
