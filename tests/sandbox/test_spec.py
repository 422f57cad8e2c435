"""SandboxSpec validation, task mapping and environment hashing."""

from __future__ import annotations

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import ConfigError
from termrl.sandbox.spec import SandboxSpec, environment_hash

DOCKERFILE = TaskFile("Dockerfile", b"FROM termrl/base:bookworm\n")


def test_invalid_specs_report_every_problem():
    with pytest.raises(ConfigError) as caught:
        SandboxSpec(network="host", cpus=0, memory_mb=-1)  # type: ignore[arg-type]
    assert len(caught.value.problems) == 4  # no image, bad network, cpus, memory
    with pytest.raises(ConfigError):
        SandboxSpec(image="x", environment_files=[DOCKERFILE])
    with pytest.raises(ConfigError, match="no Dockerfile"):
        SandboxSpec(environment_files=[TaskFile("app.py", b"")])


def test_environment_hash_depends_on_content_path_and_mode_not_order():
    a, b = TaskFile("a.sh", b"echo a", 0o755), TaskFile("b.txt", b"b")
    assert environment_hash([DOCKERFILE, a, b]) == environment_hash([b, a, DOCKERFILE])
    assert environment_hash([DOCKERFILE, a]) != environment_hash(
        [DOCKERFILE, TaskFile("a.sh", b"echo a", 0o644)]
    )
    assert environment_hash([DOCKERFILE, a]) != environment_hash(
        [DOCKERFILE, TaskFile("c.sh", b"echo a", 0o755)]
    )


def test_from_task_takes_environment_and_limits_never_tests_or_solution():
    task = Task(
        id="t",
        instruction="i",
        environment_files=[DOCKERFILE],
        cpus=2.0,
        memory_mb=1024,
        build_timeout_sec=99.0,
        allow_internet=True,
        test_files=[TaskFile("test.sh", b"secret")],
        solution_files=[TaskFile("solve.sh", b"secret")],
    )
    spec = SandboxSpec.from_task(task, lifetime_sec=30.0)
    assert spec.environment_files == [DOCKERFILE] and spec.image is None
    assert (spec.cpus, spec.memory_mb, spec.build_timeout_sec, spec.network) == (
        2.0,
        1024,
        99.0,
        "egress",
    )
    assert spec.lifetime_sec == 30.0 and spec.labels == {"termrl.task": "t"}
    assert spec.image_key == f"termrl/env:{environment_hash([DOCKERFILE])[:24]}"
    none_task = Task(
        id="u", instruction="i", environment_files=[DOCKERFILE], cpus=None, memory_mb=None
    )
    assert (SandboxSpec.from_task(none_task).cpus, SandboxSpec.from_task(none_task).memory_mb) == (
        1.0,
        2048,
    )


def test_task_env_templates_resolve_from_the_host_or_their_default():
    from termrl.errors import EnvInitFailed
    from termrl.sandbox.spec import resolve_env

    env = {"A": "${HOST_A}", "B": "${HOST_B:-fallback}", "C": "literal ${x}"}
    assert resolve_env(env, {"HOST_A": "1"}) == {"A": "1", "B": "fallback", "C": "literal ${x}"}
    with pytest.raises(EnvInitFailed, match="A = \\$\\{HOST_A\\}"):
        resolve_env(env, {})


def test_a_harbor_1_4_task_maps_to_its_image_user_workdir_and_env():
    task = Task(
        id="t",
        instruction="x",
        environment_files=[DOCKERFILE],
        docker_image="python:3.13",
        adaptations={"base_images": {"python:3.13": {"image": "localhost/termrl/base:py"}}},
        agent_user="agent",
        workdir="/srv",
        env={"MODE": "${NO_SUCH_VAR_HERE:-fast}"},
    )
    spec = SandboxSpec.from_task(task)
    assert (spec.image, spec.environment_files) == (
        "localhost/termrl/base:py",
        [],
    )  # the stand-in, nothing built
    assert (spec.user, spec.workdir, spec.env) == ("agent", "/srv", {"MODE": "fast"})
