"""Compile the pipelines to the YAML the Kubeflow UI uploads, and read such YAML back strictly.

The YAML holds the PipelineSpec and, when Kubernetes extras are set (a PVC, a
secret), a second document with the PlatformSpec. ``read_compiled`` parses
both with ``ignore_unknown_fields=False``: a field the backend would not know
is an error, not a silent drop.

The output is written for one KFP backend version (``--kfp-backend-version``,
default ``TESTED_BACKEND``): a feature the compiled YAML uses that an older
backend cannot run (``BACKEND_FEATURES``) is refused at compile time, naming
the feature and the version it needs, instead of failing in the cluster.
"""

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format
from kfp import compiler
from kfp.kubernetes.kubernetes_executor_config_pb2 import KubernetesExecutorConfig
from kfp.pipeline_spec import pipeline_spec_pb2

from pipelines.cli_options import TESTED_KFP_BACKEND
from pipelines.curriculum import CurriculumShape, build_curriculum
from pipelines.nightly_eval import build_nightly_eval
from termrl.errors import ConfigError

__all__ = [
    "BACKEND_FEATURES",
    "PIPELINES",
    "TESTED_BACKEND",
    "backend_problems",
    "compile_pipeline",
    "read_compiled",
    "release",
]

PIPELINES = {"curriculum": build_curriculum, "nightly-eval": build_nightly_eval}

TESTED_BACKEND = TESTED_KFP_BACKEND

Documents = list[dict[str, Any]]


@dataclass(frozen=True)
class BackendFeature:
    """Something the compiled YAML may use that KFP backends before ``since`` cannot run."""

    name: str
    since: str
    where: Callable[[Documents], Iterator[str]]
    """The places in the compiled documents (PipelineSpec, PlatformSpec) that use it."""


def _components(documents: Documents) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "root", documents[0]["root"]
    yield from documents[0].get("components", {}).items()


def _oneof_artifacts(documents: Documents) -> Iterator[str]:
    """A DAG output artifact picked from several producers: ``dsl.OneOf`` over branch artifacts."""
    for name, component in _components(documents):
        outputs = component.get("dag", {}).get("outputs", {}).get("artifacts", {})
        for key, selector in outputs.items():
            if len(selector.get("artifactSelectors", [])) > 1:
                yield f"{name}.{key}"


def _parameterized_resources(documents: Documents) -> Iterator[str]:
    """A resource request or limit (the accelerator's type and count) set by a pipeline parameter."""
    for name, executor in documents[0]["deploymentSpec"]["executors"].items():
        resources = executor.get("container", {}).get("resources", {})
        if "{{$.inputs.parameters" in str(resources):
            yield name


def _platform_executors(documents: Documents) -> Iterator[tuple[str, dict[str, Any]]]:
    if len(documents) == 2:
        yield from documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"].items()


def _name_parameters(documents: Documents) -> Iterator[str]:
    """kfp-kubernetes' ``secretNameParameter``/``pvcNameParameter`` (the SDK writes them always)."""
    for name, config in _platform_executors(documents):
        text = str(config)
        if "secretNameParameter" in text or "pvcNameParameter" in text:
            yield name


def _optional_secret_env(documents: Documents) -> Iterator[str]:
    for name, config in _platform_executors(documents):
        if any("optional" in entry for entry in config.get("secretAsEnv", [])):
            yield name


BACKEND_FEATURES = (
    BackendFeature(
        "dsl.OneOf over artifacts (kubeflow/pipelines#13436)", "2.17.0", _oneof_artifacts
    ),
    BackendFeature(
        "parameterized resource requests (accelerator_type, accelerator_count)",
        "2.4.0",
        _parameterized_resources,
    ),
    BackendFeature(
        "kfp-kubernetes secretNameParameter/pvcNameParameter (image pull secret, API-key "
        "secret, model-cache PVC)",
        "2.5.0",
        _name_parameters,
    ),
    BackendFeature(
        "kfp-kubernetes secretAsEnv.optional (optional API-key entries)",
        "2.15.0",
        _optional_secret_env,
    ),
)


def release(version: str, what: str = "KFP backend version") -> tuple[int, ...]:
    """``2.17.0``, ``v2.17`` -> (2, 17, 0); anything else is a ``ConfigError``. Padded to three
    parts, so that ``2.17`` compares as ``2.17.0`` (a bare tuple ``(2, 17)`` sorts below it)."""
    parts = version.strip().removeprefix("v").split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ConfigError(f"{what} {version!r} is not a release number such as 2.17.0")
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def backend_problems(documents: Documents, backend: str, pipeline: str) -> list[str]:
    """What in the compiled ``documents`` the KFP ``backend`` cannot run, one line per feature."""
    have = release(backend)
    problems = []
    for feature in BACKEND_FEATURES:
        if have >= release(feature.since):
            continue
        places = list(feature.where(documents))
        if places:
            shown = ", ".join(places[:3]) + (
                f" and {len(places) - 3} more" if len(places) > 3 else ""
            )
            problems.append(
                f"KFP backend {backend} cannot run {feature.name}: it needs {feature.since} or "
                f"newer, and the {pipeline} pipeline uses it ({shown})"
            )
    return problems


def compile_pipeline(
    name: str,
    out: str | Path,
    shape: CurriculumShape | None = None,
    backend: str = TESTED_BACKEND,
) -> Path:
    """Compile pipeline ``name`` (curriculum | nightly-eval) with ``shape`` to ``out``, for KFP
    ``backend``; refused (nothing written) when it uses a feature that backend cannot run."""
    if name not in PIPELINES:
        raise ConfigError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")
    release(backend)  # a bad version fails before the (slow) compile
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        staged = Path(tmp) / out.name
        compiler.Compiler().compile(PIPELINES[name](shape), str(staged))
        documents = [d for d in yaml.safe_load_all(staged.read_text()) if d is not None]
        if problems := backend_problems(documents, backend, name):
            raise ConfigError(problems)
        staged.replace(out)
    return out


def read_compiled(
    path: str | Path,
) -> tuple[pipeline_spec_pb2.PipelineSpec, pipeline_spec_pb2.PlatformSpec | None]:
    """The PipelineSpec (and PlatformSpec, if present) of a compiled YAML, parsed strictly."""
    documents = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    if not documents or len(documents) > 2:
        raise ConfigError(f"{path}: expected 1 or 2 YAML documents, found {len(documents)}")
    spec = json_format.ParseDict(
        documents[0], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )
    platform = None
    if len(documents) == 2:
        platform = json_format.ParseDict(
            documents[1], pipeline_spec_pb2.PlatformSpec(), ignore_unknown_fields=False
        )
        # The platform's per-executor settings are a free-form Struct in PlatformSpec:
        # check them against kfp-kubernetes' own message as well.
        executors = documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        for config in executors.values():
            json_format.ParseDict(config, KubernetesExecutorConfig(), ignore_unknown_fields=False)
    return spec, platform
