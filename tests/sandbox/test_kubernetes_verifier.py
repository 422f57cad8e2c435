"""The verifier container of a kubernetes sandbox, on ``tests.k8s_standin``: out of the agent's reach.

The integrity suite (tests/test_taskrun_integrity.py) runs its attacks on kubernetes too; these
tests check what the design rests on: the agent, root in its container and sharing the verifier's
process namespace, can neither read nor ptrace the verifier's processes, and killing them ends
scoring without a pass.
"""

from __future__ import annotations

import asyncio

import pytest

from termrl.errors import RewardFailed, SandboxDied
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.sandbox.kubernetes_verifier import VERIFIER_CAPS
from termrl.taskrun import run_tests
from tests.test_taskrun_integrity import ATTACKS, REWARD_TASK, SOLVE, TestOutcome

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]

# The verifier's idle process: `sleep infinity` that is not pid 1 (the stand-in's pause process).
FIND_VERIFIER = (
    'for d in /proc/[0-9]*; do [ "${d#/proc/}" != 1 ] && '
    "[ \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" = 'sleep infinity ' ] && echo ${d#/proc/}; done"
)


@pytest.fixture
async def kube(k8s_standin, base_images):
    async with SandboxManager(
        backend="kubernetes",
        output_limit=8192,
        kubeconfig=str(k8s_standin.kubeconfig),
        verifier_image=base_images,
    ) as manager:
        yield manager


async def test_the_agent_cannot_reach_into_the_verifiers_processes(kube, base_images):
    async with await kube.create(SandboxSpec(image=base_images)) as session:
        found = await session.exec(FIND_VERIFIER, timeout=30)
        (verifier,) = found.output.split()
        status = await session.exec(f"grep CapEff /proc/{verifier}/status", timeout=30)
        assert status.exit_code == 0  # it is visible: the process namespace is shared
        probes = (
            "ls /proc/{}/root/",
            "cat /proc/{}/environ",
            "ls -l /proc/{}/fd/1",
            "echo x > /proc/{}/fd/1",
        )
        for probe in probes:
            tried = await session.exec(probe.format(verifier) + " 2>&1", timeout=30)
            assert tried.exit_code != 0 and "Permission denied" in tried.output, tried.output
        # ptrace: the agent holds no CAP_SYS_PTRACE and the verifier holds capabilities it lacks.
        agent_caps = await session.exec("grep CapBnd /proc/self/status", timeout=30)
        assert int(agent_caps.output.split()[1], 16) & (1 << 19) == 0  # CAP_SYS_PTRACE is 19
        assert "SYS_ADMIN" in VERIFIER_CAPS


async def test_an_agent_that_kills_the_verifier_gets_no_pass(kube, base_images):
    """Root with CAP_KILL in a shared process namespace, the agent can kill the verifier: scoring
    then fails, even of a solved task (never a pass from a sandbox it cannot score)."""
    async with await kube.create(SandboxSpec(image=base_images)) as session:
        await session.exec(SOLVE, timeout=30)
        await session.exec(f"for p in $({FIND_VERIFIER}); do kill -9 $p; done", timeout=30)
        with pytest.raises((SandboxDied, RewardFailed)):
            outcome = await run_tests(session, REWARD_TASK)
            pytest.fail(f"scored {outcome.reward} without its verifier")


FORGED_BEFORE = ("service-renames-reward-into-place", "bash-skips-the-stop-helper")
"""Attacks that forged a pass (reward 1.0, nothing flagged) when scoring ran in the agent's own
container: its STOP_HELPER through the agent's bash, its tests in the agent's /logs/verifier."""


async def _score(kube, image: str, attack: str, *, solve: bool) -> TestOutcome:
    task, agent = ATTACKS[attack]
    async with await kube.create(SandboxSpec(image=image)) as session:
        if solve:
            await session.exec(SOLVE, timeout=30)
        for command in agent:
            await session.exec(command, timeout=30)
        return await run_tests(session, task)


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.parametrize("attack", FORGED_BEFORE)
async def test_attacks_that_forged_a_pass_on_kubernetes_fail(kube, base_images, attack):
    forged, honest = await asyncio.gather(  # two pods at once: each mostly waits
        _score(kube, base_images, attack, solve=False),
        _score(kube, base_images, attack, solve=True),
    )
    assert not forged.passed and forged.reward == 0.0, forged.output
    assert honest.passed and honest.reward == 1.0, honest.output
    if attack == "bash-skips-the-stop-helper":  # and the replaced bash is flagged, from outside
        assert "/usr/bin/bash: scoring runs it, changed" in forged.tampering, forged.tampering


STATUS = "grep -E '^(Uid|Gid|CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status"


async def test_the_tests_private_folders_come_from_the_stage_and_their_output_back(
    kube, base_images, tmp_path
):
    """``exec_fresh`` with binds on a pod: the folders are staged in the verifier, mounted for the
    tests' process alone, what it writes comes back; it has the agent's privileges, no more."""
    tests, verifier = tmp_path / "tests", tmp_path / "verifier"
    tests.mkdir()
    verifier.mkdir(mode=0o777)
    (tests / "test.sh").write_text("echo from-host\n")
    binds = {"/tests": (str(tests), True), "/logs/verifier": (str(verifier), False)}
    async with await kube.create(SandboxSpec(image=base_images)) as session:
        assert session.private_binds
        await session.exec("mkdir -p /tests /logs/verifier && echo agent > /tests/mine")
        seen = await session.exec_fresh(
            "ls /tests; bash /tests/test.sh; touch /tests/x 2>/dev/null || echo read-only;"
            " echo 1 > /logs/verifier/reward.txt; ln -s /etc/passwd /logs/verifier/link",
            binds=binds,
        )
        assert seen.output.split() == ["test.sh", "from-host", "read-only"], seen.output
        assert (verifier / "reward.txt").read_text() == "1\n"
        assert (verifier / "link").is_symlink()  # as the tests left it, never followed
        assert (await session.exec("ls /tests /logs/verifier")).output.split() == [
            "/logs/verifier:",
            "/tests:",
            "mine",
        ]
        shell = (await session.exec(STATUS)).output.split("\n")
        fresh = (await session.exec_fresh(STATUS, binds=binds)).output.split("\n")
        assert fresh == shell
