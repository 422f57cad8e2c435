"""SandboxSettings: a backend from the registry and its typed options, shown flat."""

from __future__ import annotations

import pytest

from components.eval.config import EvalConfig
from components.verify.config import VerifyConfig
from termrl.errors import ConfigError, SandboxUnavailable
from termrl.sandbox.manager import BACKENDS, SandboxManager
from termrl.sandbox.settings import (
    FLAT_DOCS,
    FLAT_FIELDS,
    KubernetesOptions,
    SandboxSettings,
    make_backend,
)
from termrl.settings import build_config, field_docs, parse_settings, resolve_config


def test_the_flat_names_are_generated_from_the_typed_settings():
    assert tuple(FLAT_FIELDS) == (
        "sandbox_backend",
        "sandbox_namespace",
        "sandbox_registry",
        "sandbox_pull_secret",
    )
    assert set(FLAT_DOCS) == set(FLAT_FIELDS)  # every flat name has its help
    settings = SandboxSettings("kubernetes", KubernetesOptions(namespace="sb"))
    assert settings.to_flat()["sandbox_namespace"] == "sb"
    assert SandboxSettings.from_flat(settings.to_flat()) == settings


def test_only_the_chosen_backend_gets_its_options():
    settings = SandboxSettings.from_flat({"sandbox_registry": "reg.local/ml"})
    assert settings.backend == "podman" and settings.options is None
    cluster = SandboxSettings.from_flat({"sandbox_backend": "kubernetes"}, settings)
    assert cluster.options == KubernetesOptions(registry="reg.local/ml")
    assert cluster.options.backend_kwargs() == {"registry": "reg.local/ml"}


def test_an_unknown_backend_is_a_config_problem_and_unavailable():
    assert SandboxSettings("lxc").problems() == [
        f"backend must be one of {', '.join(BACKENDS)}, not 'lxc'"
    ]
    with pytest.raises(SandboxUnavailable, match="unknown sandbox backend 'lxc'"):
        make_backend(SandboxSettings("lxc"))
    with pytest.raises(ConfigError, match="unknown sandbox setting 'sandbox_zone'"):
        SandboxSettings.from_flat({"sandbox_zone": "a"})


def test_the_manager_takes_settings_and_the_kubernetes_options_reach_the_backend():
    settings = SandboxSettings("kubernetes", KubernetesOptions("sb", "reg", "cred"))
    backend = SandboxManager(settings, api=object()).backend
    assert (backend.namespace, backend.registry, backend.image_pull_secrets) == (
        "sb",
        "reg",
        ("cred",),
    )


def test_stage_configs_take_the_flat_names_everywhere(tmp_path):
    """--set, a config file, kfp options and explicit values all reach ``config.sandbox``."""
    assert parse_settings(VerifyConfig, ["sandbox_backend=bwrap"]) == {"sandbox_backend": "bwrap"}
    config = build_config(
        EvalConfig, {"sandbox_backend": "kubernetes"}, {"sandbox_namespace": "sb"}
    )
    assert config.sandbox == SandboxSettings("kubernetes", KubernetesOptions(namespace="sb"))
    (tmp_path / "c.yaml").write_text("sandbox:\n  backend: kubernetes\nsandbox_registry: reg\n")
    config = resolve_config(
        VerifyConfig, tmp_path / "c.yaml", {"sandbox_namespace": "sb"}, ["sandbox_pull_secret=c"]
    )
    assert config.sandbox == SandboxSettings("kubernetes", KubernetesOptions("sb", "reg", "c"))
    assert field_docs(VerifyConfig)["sandbox_backend"].startswith("Sandbox backend")
