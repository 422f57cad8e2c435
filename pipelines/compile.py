"""Compile the pipelines to the YAML the Kubeflow UI uploads, and read such YAML back strictly.

The YAML holds the PipelineSpec and, when Kubernetes extras are set (a PVC, a
secret), a second document with the PlatformSpec. ``read_compiled`` parses
both with ``ignore_unknown_fields=False``: a field the backend would not know
is an error, not a silent drop.
"""

from pathlib import Path

import yaml
from google.protobuf import json_format
from kfp import compiler
from kfp.kubernetes.kubernetes_executor_config_pb2 import KubernetesExecutorConfig
from kfp.pipeline_spec import pipeline_spec_pb2

from pipelines.curriculum import CurriculumShape, build_curriculum
from pipelines.nightly_eval import build_nightly_eval
from termrl.errors import ConfigError

__all__ = ["PIPELINES", "compile_pipeline", "read_compiled"]

PIPELINES = {"curriculum": build_curriculum, "nightly-eval": build_nightly_eval}


def compile_pipeline(name: str, out: str | Path, shape: CurriculumShape | None = None) -> Path:
    """Compile pipeline ``name`` (curriculum | nightly-eval) with ``shape`` to ``out``."""
    if name not in PIPELINES:
        raise ConfigError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(PIPELINES[name](shape), str(out))
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
