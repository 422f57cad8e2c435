"""The curriculum with ``sandbox_backend=kubernetes`` under ``termrl run``, against the local API stand-in.

    tests.k8s_standin (pods are podman pods) ◄── $KUBECONFIG ── verify, demonstrate, rollout, eval
    task images: ``termrl images push-tasks --tag-only`` (the stand-in runs pods from this host's
    podman storage and pulls nothing), as an operator pushes them before a cluster run

The stages find the API server as a user's shell does: through ``$KUBECONFIG``, which kfp's local
runner hands on to every stage it starts.

slow: the whole tiny curriculum (test_local.py's ``TINY`` settings) on kubernetes: it succeeds, every
sandbox stage (and no other) made its sandboxes as pods while it ran, no pod is left, the eval table
and report are written, and verify judges every task as the podman run ``first_run`` did.
``python -m tests.k8s_standin``: the command that serves the stand-in by hand, set up as a cluster.
ci: ``evaluate`` of the podman run ``first_run``, rerun on kubernetes (``termrl rerun``): every
task and trial of the podman eval scored, each in a pod of its task's image, no environment
error, no pod left.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipelines.images_cli import images_group
from pipelines.local import RunRecord
from pipelines.pipeline_cli import compile_command, rerun, run
from termrl.artifacts.tasks import load_tasks
from termrl.sandbox.kubernetes_manifests import CONTAINER as AGENT
from tests.k8s_standin import DEFAULT_NAMESPACE, StandIn
from tests.k8s_standin.manifests import apply_cluster_manifests

pytestmark = [pytest.mark.podman, pytest.mark.timeout(3600)]

REGISTRY = "standin.local"
"""The sandbox registry of these runs: task images are tagged so in this host's podman storage."""
SANDBOX_STAGE = re.compile(r"(verify|demonstrate|rollout|evaluate)(-\d+)?")
"""The kfp task names of the stages that run task sandboxes."""
VERDICT_OUTCOME = ["task_id", "admitted", "reason", "ground_truth_passed", "noop_passed"]
"""What verify concluded about a task (its timings and judges' wording aside)."""
_LOG_LINE = re.compile(
    r"^(\d\d):(\d\d):(\d\d\.\d+) - INFO - (?:Executing task '([^']+)'|Task '([^']+)' finished)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def standin(base_images: str, tmp_path_factory: pytest.TempPathFactory):
    """The stand-in set up as ``termrl cluster manifests`` sets up a cluster."""
    with StandIn(tmp_path_factory.mktemp("k8s"), pause_base=base_images, namespaces=()) as api:
        apply_cluster_manifests(api.kubeconfig)
        yield api


def _invoke(command: Any, args: list[str], standin: StandIn | None = None) -> str:
    env = {"KUBECONFIG": str(standin.kubeconfig)} if standin else None
    result = CliRunner().invoke(command, args, env=env)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def _settings(run_args: list[str]) -> list[str]:
    """The ``--set`` pairs of a ``termrl run`` argument list."""
    pairs = [run_args[i : i + 2] for i, arg in enumerate(run_args) if arg == "--set"]
    return [arg for pair in pairs for arg in pair]


def _kubernetes(*extra: str) -> list[str]:
    return ["--set", "sandbox_backend=kubernetes", "--set", f"sandbox_registry={REGISTRY}", *extra]


def _seconds_of_day(at: float) -> float:
    local = time.localtime(at)
    return local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + at % 1


def stage_windows(run_log: Path) -> dict[str, tuple[float, float]]:
    """Each task's (start, end) in seconds of the day, from kfp's own lines in ``run.log``
    (kfp's local runner runs one task at a time, so the windows do not overlap)."""
    started: dict[str, float] = {}
    windows: dict[str, tuple[float, float]] = {}
    for line in run_log.read_text().splitlines():
        match = _LOG_LINE.match(_ANSI.sub("", line))
        if match:
            hours, minutes, seconds, executing, finished = match.groups()
            at = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
            if executing:
                started[executing] = at
            else:
                windows[finished] = (started[finished], at)
    return windows


def pods_by_stage(
    created: list[tuple[float, dict[str, Any]]], windows: dict[str, tuple[float, float]]
) -> dict[str | None, list[dict[str, Any]]]:
    """The pods created in each task's window; under None those created in no task's window."""
    by_stage: dict[str | None, list[dict[str, Any]]] = {}
    for at, pod in created:
        day = _seconds_of_day(at)
        stage = next(
            (
                name
                for name, (start, end) in windows.items()
                if (start <= day <= end if start <= end else day >= start or day <= end)
            ),
            None,
        )
        by_stage.setdefault(stage, []).append(pod)
    return by_stage


def _task_ids(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["labels"]["termrl.task"] for pod in pods}


def _tasks_of(record: RunRecord, synthesize: str) -> set[str]:
    return {task.id for task in load_tasks(Path(record.tasks[synthesize].outputs["tasks"]))}


def _verdicts(uri: str) -> list[dict[str, Any]]:
    table = pq.read_table(uri).select(VERDICT_OUTCOME)
    return sorted(table.to_pylist(), key=lambda row: row["task_id"])


def assert_no_pod_left(standin: StandIn) -> None:
    """Neither a Pod object nor a podman pod of the stand-in outlives the run."""
    assert standin.store.pods(DEFAULT_NAMESPACE) == []
    assert all("deletionTimestamp" in pod["metadata"] for _, pod in standin.store.created)
    podman = subprocess.run(
        ["podman", "pod", "ps", "-q", "--filter", f"label={standin.runtime.prefix}=1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert podman.stdout.split() == []


@pytest.fixture(scope="module")
def kubernetes_run(first_run, standin, tmp_path_factory):
    """``first_run``'s curriculum again, every sandbox on the stand-in; as an operator runs it:
    compile, tag the task images the run will synthesize, run with the kubernetes backend."""
    _, podman_args, _ = first_run
    settings = _settings(podman_args)
    work = tmp_path_factory.mktemp("kubernetes-run")
    pipeline = work / "curriculum.yaml"
    _invoke(compile_command, ["--registry", REGISTRY, "--out", str(pipeline)])
    tag = ["push-tasks", "--pipeline", str(pipeline), *settings, "--registry", REGISTRY]
    _invoke(images_group, [*tag, "--tag-only"])
    runs, before = work / "runs", len(standin.store.created)
    started = time.monotonic()
    output = _invoke(
        run, ["--runs-dir", str(runs), "--name", "k8s", *settings, *_kubernetes()], standin
    )
    seconds = time.monotonic() - started
    print(f"termrl run on kubernetes (the stand-in): {seconds / 60:.1f} min")
    return RunRecord.load(runs / "k8s"), output, standin.store.created[before:]


@pytest.mark.slow
def test_the_curriculum_runs_every_sandbox_as_a_pod(first_run, kubernetes_run, standin):
    record, output, created = kubernetes_run
    podman_record = RunRecord.load(first_run[0] / "first")
    assert record.ok and sorted(record.executed()) == sorted(podman_record.executed())
    by_stage = pods_by_stage(created, stage_windows(Path(record.run_dir) / "run.log"))
    sandbox_stages = {name for name in record.executed() if SANDBOX_STAGE.fullmatch(name)}
    assert {"verify", "verify-2", "demonstrate", "rollout", "evaluate"} <= sandbox_stages
    assert set(by_stage) == sandbox_stages  # every one made pods, and nothing else did
    heldout, training = _tasks_of(record, "synthesize-2"), _tasks_of(record, "synthesize")
    assert _task_ids(by_stage["verify-2"]) == heldout
    assert _task_ids(by_stage["verify"]) == training
    for name in sandbox_stages:
        if name.startswith("evaluate"):  # every task the eval scored ran in a pod of its own
            results = pq.read_table(record.tasks[name].outputs["results"]).to_pylist()
            assert _task_ids(by_stage[name]) == {row["task_id"] for row in results}
            broken = [row["error"] for row in results if row["failure_mode"] == "environment-error"]
            assert broken == []
    assert_no_pod_left(standin)
    table = output.split("held-out tasks: base vs imitation vs phase1 vs final policy", 1)[1]
    assert [line.split()[0] for line in table.splitlines()[2:6]] == [
        "base",
        "imitation",
        "phase1",
        "final",
    ]
    assert "Comparison" in (Path(record.run_dir) / "report.html").read_text()


@pytest.mark.slow
def test_verify_on_kubernetes_judges_every_task_as_on_podman(first_run, kubernetes_run):
    record, _, _ = kubernetes_run
    podman_record = RunRecord.load(first_run[0] / "first")
    for stage in ("verify", "verify-2"):
        on_kubernetes = _verdicts(record.tasks[stage].outputs["verdicts"])
        on_podman = _verdicts(podman_record.tasks[stage].outputs["verdicts"])
        assert on_kubernetes == on_podman and on_podman
        assert any(row["admitted"] for row in on_podman)  # the oracle passed somewhere


@pytest.mark.ci
@pytest.mark.slow
def test_an_eval_rerun_on_kubernetes_scores_every_task_in_a_pod(first_run, standin, tmp_path):
    """The ci subset: one eval of the podman run, rerun with every sandbox a pod (the full run on
    kubernetes, with verify's parity, is the slow tests above)."""
    runs, _, _ = first_run
    podman_record = RunRecord.load(runs / "first")
    run_dir = tmp_path / "first"  # a copy of the record: the reruns go beside it, not into runs/
    run_dir.mkdir()
    shutil.copy(runs / "first" / "run.json", run_dir / "run.json")
    tasks = podman_record.tasks["synthesize-2"].outputs["tasks"]
    _invoke(images_group, ["push-tasks", "--tasks", tasks, "--registry", REGISTRY, "--tag-only"])
    before = len(standin.store.created)
    args = ["evaluate", "--run", str(run_dir), "--no-cache", *_kubernetes()]
    started = time.monotonic()
    _invoke(rerun, args, standin)
    print(f"evaluate rerun on kubernetes (the stand-in): {time.monotonic() - started:.0f} s")
    (rerun_dir,) = (run_dir / "reruns").iterdir()
    (stage,) = [t for t in RunRecord.load(rerun_dir).tasks.values() if t.name == "evaluate"]
    assert stage.state == "executed"
    results = pq.read_table(stage.outputs["results"]).to_pylist()
    on_podman = pq.read_table(podman_record.tasks["evaluate"].outputs["results"]).to_pylist()
    trials = sorted((row["task_id"], row["trial"], row["agent"]) for row in results)
    assert trials == sorted((row["task_id"], row["trial"], row["agent"]) for row in on_podman)
    assert [row["error"] for row in results if row["failure_mode"] == "environment-error"] == []
    assert all(row["turns"] >= 1 for row in results)  # the policy acted in each pod
    created = [pod for _, pod in standin.store.created[before:]]
    assert _task_ids(created) == {row["task_id"] for row in results}
    images = {
        c["image"] for pod in created for c in pod["spec"]["containers"] if c["name"] == AGENT
    }
    assert images and all(image.startswith(f"{REGISTRY}/termrl/env:") for image in images)
    assert_no_pod_left(standin)


def test_the_standin_command_serves_a_cluster_set_up_by_the_manifests(base_images, tmp_path):
    """What the README's local kubernetes steps start: a kubeconfig path first, then the server."""
    from kubernetes import client, config

    from pipelines.cluster import cluster_manifests

    command = [sys.executable, "-m", "tests.k8s_standin", "--dir", str(tmp_path)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        kubeconfig = server.stdout.readline().strip()  # printed once the server answers
        assert kubeconfig == str(tmp_path / "kubeconfig")
        api = config.new_client_from_config(config_file=kubeconfig)
        policies = client.NetworkingV1Api(api).list_namespaced_network_policy(DEFAULT_NAMESPACE)
        wanted = [m for m in cluster_manifests() if m["kind"] == "NetworkPolicy"]
        assert {p.metadata.name for p in policies.items} == {m["metadata"]["name"] for m in wanted}
        quotas = client.CoreV1Api(api).list_namespaced_resource_quota(DEFAULT_NAMESPACE)
        assert len(quotas.items) == 1
        api.close()
    finally:
        server.terminate()
        assert server.wait(60) == 0
