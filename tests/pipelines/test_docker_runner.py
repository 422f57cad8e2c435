"""``termrl run --runner docker``: the stages in their image, through kfp's DockerRunner over podman.

The slow test builds the CPU stage image (podman reuses its dependency layers:
only the source layer is rebuilt after a code change; the image is kept, tagged
``pytest-docker-runner``) and runs prepare → synthesize → verify → curate, the
curriculum's own components with their compiled commands, each in a container
with no network: artifacts pass through the pipeline root kfp mounts, and
verify starts its sandboxes on this host's podman through the mounted socket.
A ``termrl rerun curate`` of that run, given no runner, reruns curate in the
same image against the same cache.
"""

# No `from __future__ import annotations`: kfp reads the pipeline function's annotations as types.
import json
import os
import shutil
import socket as sockets
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from kfp import dsl

from pipelines import docker_runner
from pipelines.docker_runner import (
    SOCKET_IN_CONTAINER,
    ContainerSettings,
    container_run_args,
    docker_host,
    podman_service,
)
from termrl.errors import ConfigError

needs_podman = pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman")


def test_stage_containers_get_the_socket_and_the_cache_at_its_own_path(tmp_path):
    args = container_run_args(ContainerSettings(Path("/run/x/podman.sock"), tmp_path))
    mounts = {m["Target"]: (m["Source"], m["Type"]) for m in args["mounts"]}
    assert mounts == {
        SOCKET_IN_CONTAINER: ("/run/x/podman.sock", "bind"),
        str(tmp_path): (str(tmp_path), "bind"),  # a --volume path the service resolves on the host
    }
    assert args["environment"] == {
        "CONTAINER_HOST": f"unix://{SOCKET_IN_CONTAINER}",
        "TERMRL_CACHE": str(tmp_path),
    }
    assert args["network_mode"] == "none"
    runner = docker_runner.docker_runner(ContainerSettings(Path("/s"), tmp_path, "bridge"))
    assert runner.container_run_args["network_mode"] == "bridge"


def test_docker_host_is_set_for_the_block_only(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://before:2375")
    with docker_host(Path("/tmp/p.sock")):
        assert os.environ["DOCKER_HOST"] == "unix:///tmp/p.sock"
    assert os.environ["DOCKER_HOST"] == "tcp://before:2375"


def test_a_listening_socket_is_used_as_it_is(tmp_path):
    path = tmp_path / "api.sock"
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        with podman_service(path, binary="no-such-podman") as found:  # nothing is started
            assert found == path


@pytest.mark.podman
@needs_podman
def test_a_service_is_started_for_the_block_and_stopped_after():
    with podman_service() as path:
        version = subprocess.run(
            ["podman", "--url", f"unix://{path}", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert version.returncode == 0 and version.stdout.strip(), version.stderr
    assert not path.exists()


@pytest.mark.podman
@needs_podman
def test_a_missing_stage_image_is_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="termrl images build"):
        docker_runner.require_image("localhost/termrl/stage-cpu:no-such-version")


@needs_podman
def test_run_refuses_a_docker_run_without_the_stage_image(tmp_path):
    from pipelines.pipeline_cli import run

    result = CliRunner().invoke(
        run,
        ["--runs-dir", str(tmp_path), "--runner", "docker", "--image", "localhost/none:x"],
    )
    assert result.exit_code != 0 and "termrl images build" in result.output


@pytest.mark.podman
@needs_podman
def test_a_stage_container_reports_its_own_exit_status_and_a_killed_one_fails(base_images, capsys):
    """kfp's DockerRunner, as ``stage_containers`` runs it: the status is the container's own, a
    container killed from outside is a failure (kfp 2.17 alone may take it for a success), and
    no container is left behind."""
    import docker

    label = {"termrl.test": f"exit-status-{os.getpid()}"}

    def kill_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed = subprocess.run(
                ["podman", "ps", "-q", "--filter", f"label=termrl.test={label['termrl.test']}"],
                capture_output=True,
                text=True,
            ).stdout.split()
            if listed:
                subprocess.run(["podman", "kill", "--signal", "KILL", *listed], check=False)
                return
            time.sleep(0.05)

    with podman_service() as path, docker_host(path):
        client = docker.from_env()
        run = docker_runner._run_stage_container
        assert run(client, base_images, ["sh", "-c", "echo out; exit 3"], {}, labels=label) == 3
        assert "out" in capsys.readouterr().out
        killer = threading.Thread(target=kill_when_running)
        killer.start()
        status = run(client, base_images, ["sh", "-c", "sleep 120"], {}, labels=label)
        killer.join()
        assert status != 0
        left = subprocess.run(
            ["podman", "ps", "-aq", "--filter", f"label=termrl.test={label['termrl.test']}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert left == []


# --- the stages in containers --------------------------------------------------------------------

TAG = "pytest-docker-runner"


def _smoke_pipeline(image: str):
    """prepare → synthesize → verify → curate: the curriculum's components, placed as it places them."""
    from pipelines.curriculum import CurriculumShape, apply_platform, make_ops

    shape = CurriculumShape(cpu_image=image, gpu_image=image)
    ops = make_ops(image, image)

    @dsl.pipeline(name="docker-runner-smoke")
    def smoke(code_version: str = "pytest-docker"):
        model = apply_platform(
            ops.prepare_model(code_version=code_version), "prepare_model", "prepare", shape
        )
        tasks = apply_platform(
            ops.synthesize(code_version=code_version, count=4, seed=0),
            "synthesize",
            "synthesize",
            shape,
        )
        verified = apply_platform(
            ops.verify(
                code_version=code_version,
                tasks=tasks.outputs["tasks"],
                judge_model=model.outputs["model"],
                judges="",
            ),
            "verify",
            "verify",
            shape,
        )
        apply_platform(
            ops.curate(
                code_version=code_version,
                admitted=verified.outputs["admitted"],
                verdicts=verified.outputs["verdicts"],
                imitation_fraction=0.5,
                expert_tasks="",
                expert_count=1,
                seed=0,
            ),
            "curate",
            "curate",
            shape,
        )

    return smoke


@pytest.fixture(scope="module")
def stage_image(base_images: str) -> str:
    """The CPU stage image of this source, built (its dependency layers reused) and kept."""
    if shutil.which("podman") is None:
        pytest.skip("needs podman")
    from pipelines.images import build_stage_image

    (image,) = build_stage_image("stage-cpu", TAG, latest=False)
    return image


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, stage_image):
    """The smoke pipeline, run once in the stage image: its record and progress lines."""
    from pipelines.local import run_pipeline_locally

    runs = tmp_path_factory.mktemp("runs")
    lines: list[str] = []
    with docker_runner.stage_containers(stage_image) as runner:
        record = run_pipeline_locally(
            _smoke_pipeline(stage_image),
            {},
            run_dir=runs / "run",
            cache_dir=runs / ".cache-docker",
            echo=lines.append,
            runner=runner,
        )
    return record, lines


@pytest.mark.slow
@pytest.mark.podman
def test_synthesize_verify_curate_run_in_the_stage_image(smoke_run, stage_image):
    from termrl.artifacts.tasks import load_tasks
    from termrl.artifacts.verdicts import read_verdicts

    image = stage_image
    record, lines = smoke_run
    log = (Path(record.run_dir) / "run.log").read_text()
    assert record.ok, "\n".join(lines) + log[-6000:]
    assert set(record.executed()) == {"prepare-model", "synthesize", "verify", "curate"}
    assert (
        f"Found image '{image}'" in log
    )  # kfp's DockerRunner ran the containers, from local storage
    verify = record.tasks["verify"].outputs
    admitted = load_tasks(verify["admitted"])
    verdicts = read_verdicts(verify["verdicts"]).to_pylist()
    assert len(verdicts) == 4 and len(admitted) >= 2
    assert {v["task_id"] for v in verdicts if v["admitted"]} == {t.id for t in admitted}
    # ground truth passed and the no-op failed in real sandboxes started on the host's podman
    assert all(v["ground_truth_passed"] and not v["noop_passed"] for v in verdicts if v["admitted"])
    curated = record.tasks["curate"].outputs
    pools = [load_tasks(curated[k]) for k in ("imitation_pool", "train_pool", "expert_pool")]
    assert sum(len(p) for p in pools[:2]) == len(admitted) and len(pools[2]) == 1


@pytest.mark.slow
@pytest.mark.podman
def test_a_stage_of_a_docker_run_reruns_in_the_stage_image(tmp_path, smoke_run, stage_image):
    """`termrl rerun curate` of a docker run, no --runner: curate again in the stage image, on the
    run's verify outputs (mounted: they are outside the rerun's pipeline root), in the run's cache."""
    from pipelines.curriculum import CurriculumShape, build_curriculum
    from pipelines.docker_runner import RunnerChoice
    from pipelines.local import RunRecord, pipeline_defaults
    from pipelines.pipeline_cli import rerun
    from termrl.artifacts.tasks import load_tasks

    smoke, _ = smoke_run
    assert smoke.ok
    # The smoke run recorded as a docker curriculum run: its verify and curate are the curriculum's.
    choice = RunnerChoice("docker", stage_image, network="none")
    curriculum = build_curriculum(CurriculumShape(**choice.images()))
    RunRecord(
        str(tmp_path),
        "termrl-curriculum",
        {**pipeline_defaults(curriculum), "code_version": "pytest-docker"},
        shape={"code_version": "pytest-docker", **choice.shape_fields()},
        cache_dir=smoke.cache_dir,
        tasks=smoke.tasks,
        ok=True,
    ).save()

    args = ["curate", "--run", str(tmp_path), "--set", "expert_count=1"]
    result = CliRunner().invoke(rerun, args)
    reruns = list((tmp_path / "reruns").iterdir())
    log = (reruns[0] / "run.log").read_text() if reruns else ""
    assert result.exit_code == 0, result.output + repr(result.exception) + log[-6000:]
    assert f"rerun · curate: executed (docker runner, {stage_image})" in result.output
    assert f"Found image '{stage_image}'" in log  # in a container of the stage image
    record = RunRecord.load(reruns[0])
    assert record.shape["runner"] == "docker" and record.cache_dir == smoke.cache_dir
    stage = next(t for t in record.tasks.values() if not t.name.startswith("importer"))
    admitted = load_tasks(smoke.tasks["verify"].outputs["admitted"])
    pools = [load_tasks(stage.outputs[k]) for k in ("imitation_pool", "train_pool", "expert_pool")]
    assert sum(len(p) for p in pools[:2]) == len(admitted) and len(pools[2]) == 1

    again = CliRunner().invoke(rerun, args)  # the same cache: a hit
    assert again.exit_code == 0, again.output
    assert "rerun · curate: cached (docker runner" in again.output


@pytest.mark.slow
@pytest.mark.podman
def test_the_tiny_curriculum_runs_with_the_docker_runner(tmp_path, stage_image, tiny_model_dir):
    """`termrl run --runner docker`: the ci curriculum (tests/pipelines/test_local.py's TINY shape), all
    its stages in containers; the tiny model reaches them through --mount."""
    from pipelines.local import RunRecord
    from pipelines.pipeline_cli import run
    from tests.pipelines.test_local import STAGES, TINY

    args = ["--runs-dir", str(tmp_path), "--name", "docker", "--runner", "docker"]
    args += ["--image", stage_image, "--mount", str(tiny_model_dir)]
    result = CliRunner().invoke(run, [*args, "--set", f"base_model={tiny_model_dir}", *TINY])
    record_path = tmp_path / "docker"
    log = (record_path / "run.log").read_text() if (record_path / "run.log").exists() else ""
    assert result.exit_code == 0, result.output + repr(result.exception) + log[-6000:]
    record = RunRecord.load(record_path)
    assert record.ok and len(record.executed()) == STAGES
    assert record.shape["runner"] == "docker" and record.shape["gpu_image"] == stage_image
    assert log.count(f"Found image '{stage_image}'") == STAGES
    assert "held-out tasks: base vs imitation vs phase1 vs final policy" in result.output
    assert (record_path / "report.html").is_file()
    assert (tmp_path / ".cache-docker").is_dir() and not (tmp_path / ".cache").exists()


# --- a killed stage container, retried --------------------------------------------------------


def _retried_pipeline(image: str, model_dir: Path):
    """prepare (the tiny model) → synthesize → demonstrate ─┬► rollout (retried)
                                                            └► train on the demonstrations (retried)
    The curriculum's components, placed (and so retried) as it places them."""
    from pipelines.curriculum import CurriculumShape, apply_platform, make_ops

    shape = CurriculumShape(cpu_image=image, gpu_image=image)
    ops = make_ops(image, image)

    @dsl.pipeline(name="docker-runner-retry")
    def retried(code_version: str = "pytest-docker-retry"):
        model = apply_platform(
            ops.prepare_model(code_version=code_version, source=str(model_dir)),
            "prepare_model",
            "prepare",
            shape,
        )
        tasks = apply_platform(
            ops.synthesize(code_version=code_version, count=2, seed=0, families="text-processing"),
            "synthesize",
            "synthesize",
            shape,
        )
        demos = apply_platform(
            ops.demonstrate(
                code_version=code_version,
                tasks=tasks.outputs["tasks"],
                policy=model.outputs["model"],
            ),
            "demonstrate",
            "demonstrate",
            shape,
        )
        apply_platform(
            ops.rollout(
                code_version=code_version,
                tasks=tasks.outputs["tasks"],
                policy=model.outputs["model"],
                groups=4,
                group_size=2,
                concurrency=1,
                max_turns=2,
                max_new_tokens=16,
            ),
            "rollout",
            "rollout",
            shape,
        )
        apply_platform(
            ops.train(
                code_version=code_version,
                trajectories=demos.outputs["demonstrations"],
                policy=model.outputs["model"],
                finetune="full",
                learning_rate=1e-4,
                epochs=60,
                grad_accum_steps=1,
                options={"save_every_steps": 1},
            ),
            "train",
            "train",
            shape,
        )

    return retried


def _stage_container(function: str) -> str | None:
    """The id of the running container of the component ``function``, if there is one."""
    listed = subprocess.run(
        ["podman", "ps", "--format", "json"], capture_output=True, text=True, timeout=60
    )
    for container in json.loads(listed.stdout or "[]"):
        command = container.get("Command") or []
        for i, word in enumerate(command[:-1]):
            if word == "--function_to_execute" and command[i + 1] == function:
                return container["Id"]
    return None


def _kill_when(function: str, ready: Callable[[], bool], timeout_sec: float = 900) -> str:
    """Wait until ``ready()``, then SIGKILL the container of ``function``; what was seen."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        if ready():
            cid = _stage_container(function)
            if cid is None:
                return f"{function}: progress seen but no running container"
            subprocess.run(["podman", "kill", "--signal", "KILL", cid], timeout=60, check=False)
            return f"{function}: killed {cid[:12]}"
        time.sleep(0.05)
    return f"{function}: nothing to kill within {timeout_sec} s"


@pytest.mark.slow
@pytest.mark.podman
def test_a_killed_stage_container_is_retried_and_resumes_its_partial_progress(
    tmp_path, stage_image, tiny_model_dir
):
    """Issue 17 item 3, as a cluster pod would live it: rollout's and train's containers are
    killed (SIGKILL) once they have written partial progress; kfp's retry starts a new container
    with the same executor input, which finds that progress in the termrl cache and resumes."""
    from pipelines.local import run_pipeline_locally
    from termrl.artifacts.trajectories import read_trajectories
    from termrl.sandbox.base_images import cache_root

    progress = cache_root() / "progress"
    before = {p for stage in ("rollout", "train") for p in (progress / stage).glob("*")}

    def new_folders(stage: str) -> list[Path]:
        return [p for p in (progress / stage).glob("*") if p not in before]

    def an_episode_written() -> bool:
        return any(any(f.glob("ep-*.parquet")) for f in new_folders("rollout"))

    def a_checkpoint_written() -> bool:
        return any(any((f / "checkpoints").glob("step-*")) for f in new_folders("train"))

    seen: list[str] = []

    def watch(stage: str, ready: Callable[[], bool]) -> None:
        seen.append(_kill_when(stage, ready))

    watchers = [  # the stages may run in either order
        threading.Thread(target=watch, args=pair, daemon=True)
        for pair in (("rollout", an_episode_written), ("train", a_checkpoint_written))
    ]
    lines: list[str] = []
    for watcher in watchers:
        watcher.start()
    with docker_runner.stage_containers(stage_image, mounts=(tiny_model_dir,)) as runner:
        record = run_pipeline_locally(
            _retried_pipeline(stage_image, tiny_model_dir),
            {},
            run_dir=tmp_path / "run",
            cache_dir=tmp_path / ".cache-docker",
            echo=lines.append,
            runner=runner,
        )
    for watcher in watchers:
        watcher.join(timeout=60)
    log = (Path(record.run_dir) / "run.log").read_text()
    assert record.ok, "\n".join(lines + seen) + log[-6000:]
    assert sorted(s.split(":")[1].split()[0] for s in seen) == ["killed", "killed"], seen
    assert any("rollout: attempt 1/3 failed, retrying" in line for line in lines), lines
    assert any("train: attempt 1/2 failed, retrying" in line for line in lines), lines

    rollout = record.tasks["rollout"].outputs
    numbers = json.loads(Path(rollout["metrics"]).read_text())
    episodes = read_trajectories(rollout["trajectories"]).to_pylist()
    assert len({r["episode_id"] for r in episodes}) == 8  # 4 groups of 2, none lost or doubled
    assert 1 <= numbers["rollout/finished_now"] < 8  # the retry ran only what the kill left

    train = record.tasks["train"].outputs
    numbers = json.loads(Path(train["metrics"]).read_text())
    assert numbers["train/resumed_at_step"] >= 1  # from the killed attempt's checkpoint
    assert numbers["train/resumed_at_step"] < numbers["train/steps"]
    assert (Path(train["checkpoint"]) / "config.json").is_file()  # the artifact loads as a model
    assert not new_folders("train") and not new_folders("rollout")  # progress dropped when done
