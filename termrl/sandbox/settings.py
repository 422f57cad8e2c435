"""Which sandbox backend a stage runs its tasks on, and that backend's typed options.

    SandboxSettings()                                           podman, nothing to set
    SandboxSettings("kubernetes", KubernetesOptions(namespace="sb", registry="reg.local/ml"))
    SandboxSettings.from_flat({"sandbox_backend": "kubernetes", "sandbox_namespace": "sb"})
    make_backend(settings, api=...)                             the backend it names

``BACKENDS`` is the registry: each backend's name, the ``SandboxSettings`` field holding
its typed options (None: it takes none from a stage) and how it is made. The sandbox
stages (demonstrate, eval, rollout, verify) nest one ``SandboxSettings`` in their config
(``config.sandbox``). A KFP component, a stage command and a pipeline show it flat:
``sandbox_backend``, then every option of every backend as ``sandbox_<option>``
(``FLAT_FIELDS``). The options of a backend other than the chosen one are ignored, so one
set of pipeline parameters serves a local run and a cluster.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from termrl.errors import ConfigError, SandboxUnavailable
from termrl.sandbox.backend import Backend

__all__ = [
    "BACKENDS",
    "FLAT_FIELDS",
    "BackendKind",
    "KubernetesOptions",
    "SandboxSettings",
    "make_backend",
]

FLAT_PREFIX = "sandbox_"


@dataclass(frozen=True)
class KubernetesOptions:
    """The kubernetes backend's options ('' = the backend's own default)."""

    namespace: str = ""
    """Namespace of the sandbox pods ('' = ``termrl-sandboxes``, what ``termrl cluster
    manifests`` sets up)."""
    registry: str = ""
    """Registry of the task environment images (``REG/termrl/env:<hash>``, pushed by
    ``termrl images push-tasks``)."""
    pull_secret: str = ""
    """Image pull secret of the sandbox pods, in the sandbox namespace ('' = none)."""

    def backend_kwargs(self) -> dict[str, Any]:
        """``KubernetesBackend`` keyword arguments: only the options that are set."""
        kwargs: dict[str, Any] = {"namespace": self.namespace} if self.namespace else {}
        if self.registry:
            kwargs["registry"] = self.registry
        if self.pull_secret:
            kwargs["image_pull_secrets"] = (self.pull_secret,)
        return kwargs


def _podman(binary: str) -> Callable[[None, dict[str, Any]], Backend]:
    def make(options: None, extra: dict[str, Any]) -> Backend:
        from termrl.sandbox.podman import PodmanBackend

        return PodmanBackend(extra.pop("binary", binary), **extra)

    return make


def _bwrap(options: None, extra: dict[str, Any]) -> Backend:
    from termrl.sandbox.bwrap import BwrapBackend

    return BwrapBackend(**extra)


def _kubernetes(options: KubernetesOptions, extra: dict[str, Any]) -> Backend:
    from termrl.sandbox.kubernetes import KubernetesBackend

    return KubernetesBackend(**{**options.backend_kwargs(), **extra})


@dataclass(frozen=True)
class BackendKind:
    """One registered backend: where its options live and how it is made."""

    options_field: str | None
    """The ``SandboxSettings`` field of its typed options; None: a stage sets none."""
    make: Callable[[Any, dict[str, Any]], Backend]
    """(its options, extra keyword arguments) -> the backend; imports it only when chosen."""
    summary: str


BACKENDS: dict[str, BackendKind] = {
    "podman": BackendKind(None, _podman("podman"), "containers on this host (the default)"),
    "docker": BackendKind(None, _podman("docker"), "the same, through a Docker CLI"),
    "bwrap": BackendKind(None, _bwrap, "bubblewrap over an overlay: fast, dense, local"),
    "kubernetes": BackendKind("kubernetes", _kubernetes, "one pod per sandbox, on a cluster"),
}


@dataclass(frozen=True)
class SandboxSettings:
    """The sandbox backend of a stage and its options."""

    backend: str = "podman"
    """Where the stage runs task sandboxes: podman (a local run), docker, bwrap, or
    kubernetes (a pod per sandbox)."""
    kubernetes: KubernetesOptions = field(default_factory=KubernetesOptions)
    """The kubernetes backend's options; the other backends ignore them."""

    @property
    def options(self) -> Any:
        """The chosen backend's typed options (None for a backend that takes none)."""
        kind = BACKENDS.get(self.backend)
        return getattr(self, kind.options_field) if kind and kind.options_field else None

    def problems(self) -> list[str]:
        if self.backend not in BACKENDS:
            return [f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}"]
        return []

    def to_flat(self) -> dict[str, Any]:
        """``{"sandbox_backend": ..., "sandbox_namespace": ..., ...}``."""
        return {name: _get(self, path) for name, (path, _) in FLAT_FIELDS.items()}

    @classmethod
    def from_flat(cls, values: Mapping[str, Any], base: SandboxSettings | None = None) -> Any:
        """``base`` (default: the defaults) with the flat ``values`` that are not None set."""
        unknown = sorted(set(values) - set(FLAT_FIELDS))
        if unknown:
            raise ConfigError([f"unknown sandbox setting {k!r}" for k in unknown])
        settings = base or cls()
        for name, value in values.items():
            if value is not None:
                settings = _replace(settings, FLAT_FIELDS[name][0], value)
        return settings

    @classmethod
    def flat_types(cls) -> dict[str, Any]:
        """Each flat name's type (``termrl.settings`` types ``--set`` and KFP options by it)."""
        return {name: kind for name, (_, kind) in FLAT_FIELDS.items()}

    @classmethod
    def flat_cli(cls) -> dict[str, dict[str, Any]]:
        """Command-line extras of the flat names: ``--backend`` (the stage commands' older name)
        and the registered backends as the choices of ``--sandbox-backend``."""
        return {"sandbox_backend": {"aliases": ("--backend",), "choices": tuple(BACKENDS)}}

    @classmethod
    def flat_docs(cls) -> dict[str, str]:
        """Each flat name's one-line description (the KFP parameters' and CLI options' help)."""
        return dict(FLAT_DOCS)


def _flat_fields() -> dict[str, tuple[tuple[str, ...], Any]]:
    """flat name -> (path in ``SandboxSettings``, type): ``backend`` and every backend option."""
    flat: dict[str, tuple[tuple[str, ...], Any]] = {}
    hints = typing.get_type_hints(SandboxSettings)
    for top in dataclasses.fields(SandboxSettings):
        kind = hints[top.name]
        if dataclasses.is_dataclass(kind):
            nested = typing.get_type_hints(kind)
            for option in dataclasses.fields(kind):
                name = FLAT_PREFIX + option.name
                if name in flat:  # two backends' options must not share a flat name
                    raise TypeError(f"sandbox option {name} is declared twice")
                flat[name] = ((top.name, option.name), nested[option.name])
        else:
            flat[FLAT_PREFIX + top.name] = ((top.name,), kind)
    return flat


def _get(settings: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        settings = getattr(settings, part)
    return settings


def _replace(settings: Any, path: tuple[str, ...], value: Any) -> Any:
    if len(path) == 1:
        return dataclasses.replace(settings, **{path[0]: value})
    inner = _replace(getattr(settings, path[0]), path[1:], value)
    return dataclasses.replace(settings, **{path[0]: inner})


FLAT_FIELDS: dict[str, tuple[tuple[str, ...], Any]] = _flat_fields()
"""flat name (a KFP parameter, a CLI option, a ``--set`` key) -> (its path, its type)."""

FLAT_DOCS: dict[str, str] = {
    "sandbox_backend": f"Sandbox backend: {', '.join(BACKENDS)}.",
    "sandbox_namespace": "kubernetes backend: namespace of the sandbox pods "
    "('' = termrl-sandboxes).",
    "sandbox_registry": "kubernetes backend: registry of the task environment images "
    "(REG/termrl/env:<hash>, pushed by termrl images push-tasks).",
    "sandbox_pull_secret": "kubernetes backend: image pull secret of the sandbox pods ('' = none).",
}
"""The flat names' help; a test checks every flat name has one."""


def make_backend(settings: SandboxSettings | str, **extra: Any) -> Backend:
    """The backend ``settings`` names, with its options; ``extra`` keyword arguments reach the
    backend's constructor as they are (a test's stand-in API, podman's build concurrency)."""
    if isinstance(settings, str):
        settings = SandboxSettings(settings)
    kind = BACKENDS.get(settings.backend)
    if kind is None:
        raise SandboxUnavailable(
            f"unknown sandbox backend {settings.backend!r}; choose one of {', '.join(BACKENDS)}"
        )
    return kind.make(settings.options, dict(extra))
