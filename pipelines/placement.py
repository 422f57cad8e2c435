"""What a cluster needs to place the stages' pods: images it can pull, and the GPU nodes' taints and labels.

    cluster_images(registry, cpu_image, gpu_image, tag)   --registry REG -> REG/termrl/stage-cpu:TAG, ...;
                                                          a full name given wins
    local_images(names)                                   the names no cluster can pull (localhost/..., no host)
    parse_gpu_placement(tolerations, node_selector)       the GPU stages' tolerations and node selector:
        Toleration.parse("nvidia.com/gpu=present:NoSchedule")   KEY[=VALUE][:EFFECT] (no VALUE: operator Exists)
        parse_node_selector(["gpu.node/type=h100"])             LABEL=VALUE pairs

No kfp here: the command line parses its options with these before importing
kfp, and the Argo path uses them without kfp at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from components.images import CPU_IMAGE, GPU_IMAGE
from termrl.errors import ConfigError

__all__ = [
    "TAINT_EFFECTS",
    "Toleration",
    "cluster_images",
    "label_problems",
    "local_images",
    "parse_gpu_placement",
    "parse_node_selector",
    "registry_image",
]

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_LOCAL_HOST = "localhost"
"""podman's name for images that exist only in local storage (``localhost/termrl/stage-cpu``)."""

_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(
    rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}"
)
_LABEL_VALUE = re.compile(rf"({_NAME})?")


def _repository(local_name: str) -> str:
    """``localhost/termrl/stage-cpu:latest`` -> ``termrl/stage-cpu``: the path every registry keeps."""
    return local_name.removeprefix(f"{_LOCAL_HOST}/").rsplit(":", 1)[0]


def registry_image(registry: str, local_name: str, tag: str) -> str:
    """The name under which ``registry`` holds the image built locally as ``local_name``, tagged ``tag``."""
    if not _TAG.fullmatch(tag):
        raise ConfigError(
            f"image tag {tag!r} (the code version) is not valid: at most 128 of letters, digits, "
            "'_', '.', '-', not starting with '.' or '-'"
        )
    return f"{registry.rstrip('/')}/{_repository(local_name)}:{tag}"


def local_images(names: Iterable[str]) -> list[str]:
    """The names a cluster cannot pull: ``localhost/...`` or no registry host (``termrl/stage-cpu:1``).

    A first path component is a registry host when it has a '.' or a ':' (the
    rule docker and podman apply); ``localhost:5000/...`` is a real registry.
    """
    local = []
    for name in names:
        host, slash, _ = name.partition("/")
        if not slash or host == _LOCAL_HOST or not ("." in host or ":" in host):
            local.append(name)
    return local


def cluster_images(
    registry: str | None, cpu_image: str | None, gpu_image: str | None, tag: str
) -> tuple[str, str]:
    """The (CPU, GPU) stage images: each full name given, else ``registry``'s, else the local default."""

    def pick(given: str | None, local_name: str) -> str:
        if given:
            return given
        return registry_image(registry, local_name, tag) if registry else local_name

    return pick(cpu_image, CPU_IMAGE), pick(gpu_image, GPU_IMAGE)


def label_problems(key: str, value: str, what: str) -> list[str]:
    """What is wrong with a Kubernetes label (or taint) key and value, as the API server would check it."""
    problems = []
    if not _LABEL_KEY.fullmatch(key):
        problems.append(
            f"{what}: {key!r} is not a valid label key ([prefix/]name, name <= 63 characters)"
        )
    if not _LABEL_VALUE.fullmatch(value):
        problems.append(f"{what}: {value!r} is not a valid label value (<= 63 of [A-Za-z0-9_.-])")
    return problems


@dataclass(frozen=True)
class Toleration:
    """A toleration of a GPU node taint: ``KEY[=VALUE][:EFFECT]`` on the command line."""

    key: str
    value: str = ""
    """'' tolerates every value of ``key`` (operator Exists); else operator Equal."""
    effect: str = ""
    """'' tolerates every effect; else one of ``TAINT_EFFECTS``."""

    @property
    def operator(self) -> str:
        return "Equal" if self.value else "Exists"

    @classmethod
    def parse(cls, text: str) -> Toleration:
        """``nvidia.com/gpu:NoSchedule``, ``dedicated=gpu:NoExecute``, ``nvidia.com/gpu`` (any effect)."""
        # Neither label keys nor values may hold ':' or '=', so the split is unambiguous.
        rest, colon, effect = text.rpartition(":")
        key, _, value = (rest if colon else effect).partition("=")
        toleration = cls(key, value, effect if colon else "")
        if problems := toleration.problems():
            raise ConfigError(problems)
        return toleration

    def __str__(self) -> str:
        return (
            self.key
            + (f"={self.value}" if self.value else "")
            + (f":{self.effect}" if self.effect else "")
        )

    def problems(self) -> list[str]:
        what = f"toleration {str(self)!r}"
        problems = label_problems(self.key, self.value, what)
        if self.effect and self.effect not in TAINT_EFFECTS:
            problems.append(
                f"{what}: effect must be one of {', '.join(TAINT_EFFECTS)}, not {self.effect!r}"
            )
        return problems

    def manifest(self) -> dict[str, Any]:
        """The toleration as a pod spec holds it."""
        fields = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
        }
        return {name: value for name, value in fields.items() if value}


def parse_gpu_placement(
    tolerations: Iterable[str], node_selector: Iterable[str]
) -> tuple[tuple[Toleration, ...], tuple[tuple[str, str], ...]]:
    """``KEY[=VALUE][:EFFECT]`` tolerations and ``LABEL=VALUE`` node selectors; every problem at once."""
    parsed, problems = [], []
    for text in tolerations:
        try:
            parsed.append(Toleration.parse(text))
        except ConfigError as exc:
            problems += exc.problems
    try:
        pairs = parse_node_selector(node_selector)
    except ConfigError as exc:
        problems += exc.problems
    if problems:
        raise ConfigError(problems)
    return tuple(parsed), pairs


def parse_node_selector(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``LABEL=VALUE`` items as (label, value) pairs; every problem at once."""
    pairs, problems = [], []
    for item in items:
        label, equals, value = item.partition("=")
        if not equals:
            problems.append(f"node selector {item!r}: expected LABEL=VALUE")
            continue
        problems += label_problems(label, value, f"node selector {item!r}")
        pairs.append((label, value))
    labels = [label for label, _ in pairs]
    problems += [
        f"node selector: label {label!r} is given twice"
        for label in sorted(set(labels))
        if labels.count(label) > 1
    ]
    if problems:
        raise ConfigError(problems)
    return tuple(pairs)
