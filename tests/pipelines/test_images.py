"""``termrl images build | push | push-tasks``: the images a cluster pulls.

The slow tests build the CPU stage image for real (offline, ``--network=none``),
run its default policy with no network, and push it, the sandbox base images
and task environments to a real registry: Debian's ``docker-registry`` on a
free localhost port (plain HTTP, so ``--no-tls-verify``). What the registry
holds is read back through its HTTP API.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines import images
from pipelines.images_cli import images_group
from termrl.errors import ConfigError
from termrl.sandbox.base_images import BASE_IMAGES

REGISTRY_BINARY = "/usr/bin/docker-registry"


def test_stage_requirements_carry_the_runtime_and_the_build_backend():
    requirements = images.stage_requirements()
    assert any(r.startswith("torch") for r in requirements)
    assert any(
        r.startswith("setuptools") for r in requirements
    )  # pip install --no-build-isolation needs it


def test_base_images_are_pushed_under_the_registry_with_their_own_names():
    targets = images.base_image_targets("reg.example:5000/team/")
    assert targets[0] == (
        "localhost/termrl/base:bookworm",
        "reg.example:5000/team/termrl/base:bookworm",
    )
    assert len(targets) == len(BASE_IMAGES)


def test_debs_are_fetched_for_the_base_image_s_debian_release():
    # fetch_debs refuses a host whose apt serves another release than the base image's
    assert images._codename('NAME="Debian"\nVERSION_CODENAME=bookworm\n') == "bookworm"
    assert images._codename('VERSION_CODENAME="trixie"') == "trixie"
    assert images._codename("ID=alpine\n") == ""
    assert "podman" in images.DEB_PACKAGES
    dockerfile = (images.ROOT / "images/stage-cpu/Dockerfile").read_text()
    assert (
        "dpkg -i /tmp/debs/*.deb" in dockerfile
    )  # the client the sandbox stages use in a container


def test_an_unknown_stage_image_is_refused():
    with pytest.raises(ConfigError, match="unknown stage image"):
        images.build_stage_image("stage-tpu", "1")


def test_the_cli_lists_build_push_and_push_tasks():
    result = CliRunner().invoke(images_group, ["--help"])
    assert result.exit_code == 0
    assert {"build", "push", "push-tasks"} <= set(result.output.split())


# --- a real registry ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local registry (Debian's docker-registry, `apt-get install docker-registry`): ``127.0.0.1:PORT``."""
    if not Path(REGISTRY_BINARY).exists():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    root = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: {address}\n"
    )
    server = subprocess.Popen(
        [REGISTRY_BINARY, "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):  # the registry answers /v2/ once it listens
            try:
                _get(f"http://{address}/v2/")
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail("docker-registry exited at start")
                time.sleep(0.1)
        yield address
    finally:
        server.terminate()
        server.wait(timeout=30)


def _tags(registry: str, repository: str) -> list[str]:
    return _get(f"http://{registry}/v2/{repository}/tags/list").get("tags") or []


TAG = "pytest-images"


def _python_in(image: str, code: str) -> str:
    """``python -c code`` in a container of ``image`` with no network; its stdout (it must succeed)."""
    run = subprocess.run(
        ["podman", "run", "--rm", "--network=none", image, "python", "-c", code],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman")
def test_build_then_push_puts_the_stage_and_base_images_in_a_registry(registry: str):
    local = f"localhost/termrl/stage-cpu:{TAG}"
    runner = CliRunner()
    try:
        names = images.build_stage_image("stage-cpu", TAG, latest=False)
        assert names == [local]
        # The default policy is inside and loads with no network: "prepare base policy" in a pod.
        listed = _python_in(
            local,
            "from pipelines.glue import materialize_model; import pathlib; materialize_model('', '/tmp/m'); "
            "print(sorted(p.name for p in pathlib.Path('/tmp/m').iterdir()))",
        )
        assert "model.safetensors" in listed and "tokenizer.json" in listed
        # The image's gcc builds the decode step's kernels for this CPU, in the container.
        _python_in(
            local,
            "from termrl.llm import decode_kernels; assert decode_kernels.load_ops() is not None",
        )

        result = runner.invoke(
            images_group, ["push", "--registry", registry, "--tag", TAG, "--no-tls-verify"]
        )
        assert result.exit_code == 0, result.output
        assert f"pushed {registry}/termrl/stage-cpu:{TAG}" in result.output
        assert _tags(registry, "termrl/stage-cpu") == [TAG]
        for base in BASE_IMAGES:
            repository, tag = base.name.split(":")
            assert tag in _tags(registry, repository), base.name
    finally:
        subprocess.run(["podman", "rmi", "-f", local], capture_output=True, timeout=300)


# --- task environments --------------------------------------------------------------------------


def _compile(tmp_path: Path, name: str) -> Path:
    from pipelines.compile import compile_pipeline

    return compile_pipeline(name, tmp_path / f"{name}.yaml")


def test_the_curriculum_synthesizes_training_and_held_out_tasks_with_the_run_s_arguments(tmp_path):
    from pipelines.task_images import pipeline_synthesize_arguments

    calls = pipeline_synthesize_arguments(
        _compile(tmp_path, "curriculum"),
        ["synth_count=5", "heldout_seed=7", "synthesize.perturbation_rate=0"],
    )
    left_out = "config-edit,find-xargs,users-groups"
    assert sorted(
        (a["count"], a["seed"], a["exclude_families"], a.get("extra_count")) for a in calls.values()
    ) == [(5, 0, left_out, None), (48, 7, left_out, 18)]
    assert all(a["options"] == {"perturbation_rate": 0.0} for a in calls.values())
    # The held-out synthesis avoids the training tasks: it reads the other task's artifact.
    assert sorted(str(a.get("avoid")) for a in calls.values()) == [
        "FromTask(task='synthesize')",
        "None",
    ]


def test_the_held_out_tasks_built_ahead_avoid_the_training_tasks(tmp_path):
    from pipelines.task_images import synthesize_pipeline_tasks
    from termrl.artifacts import load_tasks

    training, heldout = (
        load_tasks(p)
        for p in synthesize_pipeline_tasks(
            _compile(tmp_path, "curriculum"),
            ["synth_count=6", "heldout_count=6", "heldout_family_count=3", "heldout_seed=0"],
            tmp_path / "tasks",
        )
    )
    # The same seed for both: only the avoided artifact keeps them apart.
    assert len(training) == 6 and len(heldout) == 9
    assert not {t.id for t in training} & {t.id for t in heldout}


def test_llm_written_tasks_cannot_be_built_ahead(tmp_path):
    from pipelines.task_images import pipeline_synthesize_arguments

    with pytest.raises(ConfigError, match="LLM-written tasks"):
        pipeline_synthesize_arguments(
            _compile(tmp_path, "curriculum"), ["synth_llm_model=openai/gpt-4o"]
        )


def test_push_tasks_needs_a_pipeline_or_tasks():
    result = CliRunner().invoke(images_group, ["push-tasks", "--registry", "reg.example.com"])
    assert result.exit_code != 0 and "--pipeline" in result.output


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman")
def test_push_tasks_pushes_the_environments_the_kubernetes_backend_will_pull(
    registry: str, tmp_path: Path
):
    """The nightly eval's tasks, synthesized here as its synthesize stage will: each environment lands at the
    name the kubernetes backend computes for the task in the pod."""
    import asyncio

    from pipelines.task_images import synthesize_pipeline_tasks
    from termrl.artifacts.tasks import load_tasks
    from termrl.sandbox.kubernetes import KubernetesBackend
    from termrl.sandbox.spec import SandboxSpec

    pipeline = _compile(tmp_path, "nightly-eval")
    result = CliRunner().invoke(
        images_group,
        [
            "push-tasks",
            "--pipeline",
            str(pipeline),
            "--set",
            "task_count=2",
            "--registry",
            registry,
            "--no-tls-verify",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "pushed 2 task environment image(s)" in result.output
    # the same tasks, as the synthesize stage in the run writes them; the names the pod pulls
    (tasks,) = synthesize_pipeline_tasks(pipeline, ["task_count=2"], tmp_path / "again")
    backend = KubernetesBackend(
        registry=registry, api=object()
    )  # no API calls: only the image name
    pulled = {asyncio.run(backend.build_image(SandboxSpec.from_task(t))) for t in load_tasks(tasks)}
    assert pulled == {f"{registry}/termrl/env:{tag}" for tag in _tags(registry, "termrl/env")}


def test_both_stage_images_carry_the_same_default_policy_package():
    for name in images.STAGE_IMAGES:
        dockerfile = (images.ROOT / "images" / name / "Dockerfile").read_text()
        assert "find_default_gguf" in dockerfile, (
            name
        )  # the build fails without the policy's weights
    assert images.POLICY_PACKAGE in (images.ROOT / "images/stage-gpu/Dockerfile").read_text()
