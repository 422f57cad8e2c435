"""``termrl rerun``'s runner: the one the run recorded unless given, in the matching cache.

No stage executes here: ``run_pipeline_locally`` and the stage containers are replaced by
recorders, so these tests see what a run and a rerun would hand kfp. A rerun that executes,
in the stage image, is tests/pipelines/test_docker_runner.py's slow test; one by subprocesses,
tests/pipelines/test_local.py's.
"""

import contextlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines import docker_runner, local
from pipelines.docker_runner import RunnerChoice
from pipelines.local import RunRecord, TaskRecord
from pipelines.pipeline_cli import rerun, run

IMAGE = "localhost/termrl/stage-cpu:src-recorded"
VERIFY_OUTPUTS = ("admitted", "verdicts")  # curate's inputs


class Recorder:
    """Stands in for ``run_pipeline_locally`` and ``stage_containers``: keeps what they were given."""

    def __init__(self):
        self.runs: list[dict] = []
        self.containers: list[tuple] = []

    def run_pipeline_locally(self, pipeline, arguments, *, run_dir, cache_dir, shape, runner, **_):
        self.runs.append({"cache_dir": Path(cache_dir), "shape": shape, "runner": runner})
        outputs = {key: str(Path(run_dir) / "artifacts" / key) for key in VERIFY_OUTPUTS}
        for path in outputs.values():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text("")
        name = "verify" if pipeline.name == "termrl-curriculum" else "curate"
        record = RunRecord(
            str(run_dir),
            pipeline.name,
            {**local.pipeline_defaults(pipeline), **arguments},
            shape=shape,
            cache_dir=str(Path(cache_dir).resolve()),
            tasks={name: TaskRecord(name, f"rerun · {name}", "executed", outputs=outputs)},
            ok=True,
        )
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        record.save()
        return record

    @contextlib.contextmanager
    def stage_containers(self, image, socket=None, network="none", *, mounts=(), cache=None):
        self.containers.append((image, socket, network, mounts))
        yield "kfp DockerRunner"


@pytest.fixture
def recorder(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(local, "run_pipeline_locally", recorder.run_pipeline_locally)
    monkeypatch.setattr("pipelines.rerun.run_pipeline_locally", recorder.run_pipeline_locally)
    monkeypatch.setattr(docker_runner, "stage_containers", recorder.stage_containers)
    return recorder


def _run(runs: Path, *args: str) -> Path:
    result = CliRunner().invoke(run, ["--runs-dir", str(runs), "--name", "run", *args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return runs / "run"


def _rerun(run_dir: Path, *args: str) -> str:
    result = CliRunner().invoke(rerun, ["curate", "--run", str(run_dir), *args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_a_docker_run_records_its_runner_and_reruns_by_it_in_its_cache(tmp_path, recorder):
    models = tmp_path / "models"
    models.mkdir()
    run_dir = _run(tmp_path, "--runner", "docker", "--image", IMAGE, "--mount", str(models))
    assert recorder.containers == [(IMAGE, None, "none", (models,))]
    made = recorder.runs[0]
    assert made["runner"] == "kfp DockerRunner" and made["cache_dir"] == tmp_path / ".cache-docker"
    assert made["shape"] == {
        "phase1_iterations": 1,
        "phase2_iterations": 1,
        "colocate": False,
        "code_version": made["shape"]["code_version"],
        "runner": "docker",
        "cpu_image": IMAGE,
        "gpu_image": IMAGE,
        "container_network": "none",
        "mounts": [str(models.resolve())],
    }

    output = _rerun(run_dir)  # no runner option: the run's
    inputs = RunRecord.load(run_dir).tasks["verify"].outputs
    image, _, network, mounts = recorder.containers[1]
    # in the run's image, its mounts and network, curate's inputs mounted from the run folder
    assert (image, network) == (IMAGE, "none")
    assert mounts[0] == models.resolve() and set(mounts[1:]) == {Path(p) for p in inputs.values()}
    again = recorder.runs[1]
    assert again["runner"] == "kfp DockerRunner"
    assert again["cache_dir"] == (tmp_path / ".cache-docker").resolve()
    assert again["shape"]["runner"] == "docker" and again["shape"]["cpu_image"] == IMAGE
    assert f"rerun · curate: executed (docker runner, {IMAGE})\n" in output
    assert f"cache: {(tmp_path / '.cache-docker').resolve()}" in output


def test_the_rerun_component_runs_in_the_recorded_image(tmp_path, recorder):
    from pipelines.rerun import plan_rerun

    record = RunRecord.load(_run(tmp_path, "--runner", "docker", "--image", IMAGE))
    plan = plan_rerun(record, "curate", ())
    assert plan.component.component_spec.implementation.container.image == IMAGE
    assert plan.runner == RunnerChoice("docker", IMAGE, None, "none", ())
    other = plan_rerun(record, "curate", (), RunnerChoice(image="localhost/other:1"))
    assert other.component.component_spec.implementation.container.image == "localhost/other:1"


def test_a_runner_asked_for_wins_and_the_summary_says_which_ran(tmp_path, recorder):
    run_dir = _run(tmp_path, "--runner", "docker", "--image", IMAGE)
    output = _rerun(run_dir, "--runner", "subprocess")
    assert len(recorder.containers) == 1  # the run's only
    again = recorder.runs[1]
    # kfp's subprocesses, in the subprocess runner's cache: a docker cache hit would hide which ran
    assert again["runner"] is None and again["cache_dir"] == tmp_path / ".cache"
    assert again["shape"]["runner"] == "subprocess" and "cpu_image" not in again["shape"]
    assert "rerun · curate: executed (subprocess runner; the run used the docker runner)" in output


def test_a_subprocess_run_reruns_by_subprocesses_or_in_containers_when_asked(tmp_path, recorder):
    run_dir = _run(tmp_path, "--cache-dir", str(tmp_path / "mine"))
    assert recorder.runs[0]["shape"]["runner"] == "subprocess" and not recorder.containers
    output = _rerun(run_dir)
    again = recorder.runs[1]
    assert again["runner"] is None and again["cache_dir"] == (tmp_path / "mine").resolve()
    assert "rerun · curate: executed (subprocess runner)\n" in output

    output = _rerun(
        run_dir, "--runner", "docker", "--image", IMAGE, "--container-network", "bridge"
    )
    assert recorder.containers[0][:3] == (IMAGE, None, "bridge")
    again = recorder.runs[2]
    assert (
        again["runner"] == "kfp DockerRunner" and again["cache_dir"] == tmp_path / ".cache-docker"
    )
    assert f"(docker runner, {IMAGE}; the run used the subprocess runner)" in output


def test_a_run_recorded_before_runners_was_made_by_subprocesses():
    shape = {"phase1_iterations": 1, "phase2_iterations": 1, "code_version": "src-old"}
    assert RunnerChoice().or_recorded(shape) == RunnerChoice("subprocess")
    assert RunnerChoice("docker").or_recorded(shape) == RunnerChoice("docker")  # no recorded image


def test_options_given_win_over_the_recorded_ones_and_mounts_add_up():
    shape = RunnerChoice("docker", IMAGE, None, "none", (Path("/models"),)).shape_fields()
    given = RunnerChoice(None, "localhost/x:1", Path("/s.sock"), "bridge", (Path("/data"),))
    assert given.or_recorded(shape) == RunnerChoice(
        "docker", "localhost/x:1", Path("/s.sock"), "bridge", (Path("/models"), Path("/data"))
    )
    assert RunnerChoice().or_recorded(shape) == RunnerChoice(
        "docker", IMAGE, None, "none", (Path("/models"),)
    )


def test_rerun_takes_the_runner_options_of_run():
    def defaults(command):
        runner = ("--runner", "--image", "--podman-socket", "--container-network")
        return {p.opts[0]: p.default for p in command.params if p.opts[0] in runner}

    # the same options; a rerun's unset ones are the run's
    assert defaults(run) == {
        "--runner": "subprocess",
        "--image": None,
        "--podman-socket": None,
        "--container-network": "none",
    }
    assert defaults(rerun) == {**defaults(run), "--runner": None, "--container-network": None}
    mounts = [p for command in (run, rerun) for p in command.params if p.opts == ["--mount"]]
    assert len(mounts) == 2 and all(p.multiple for p in mounts)  # a rerun's add to the run's
