"""Fresh processes and stopped agents, on podman and bwrap: the channel scoring runs through.

``exec_fresh`` must start a process that shares nothing with the agent's
shell (functions, exported variables, working directory) and has no more
privilege than it (user, capability sets, no_new_privs, seccomp, cgroups);
``agent_stopped`` must stop what the agent left running, except its services.
"""

from __future__ import annotations

import asyncio

import pytest

from termrl.sandbox import SandboxSpec
from tests.sandbox.cancelling import left_after_cancelling

pytestmark = pytest.mark.podman

STATUS = "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status"
CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def _fields(output: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in output.splitlines())


async def test_a_fresh_process_has_no_more_privilege_than_the_agents_shell(local, base_images):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await _no_more_privilege(session)


def _scoring_dirs(host) -> dict[str, tuple[str, bool]]:
    """Host folders as scoring mounts them: the tests (read-only, one script) and the verifier's."""
    (host / "tests").mkdir()
    (host / "tests" / "test.sh").write_text("echo from-host\n")
    (host / "verifier").mkdir()
    return {
        "/tests": (str(host / "tests"), True),
        "/logs/verifier": (str(host / "verifier"), False),
    }


async def test_a_process_with_private_directories_has_no_more_privilege_and_its_own_view(
    local, base_images, tmp_path
):
    """What scoring runs: host directories at /tests (read-only) and /logs/verifier for it alone, entered
    by the host's root, in a user namespace of its own. Still no more than the agent has."""
    binds = _scoring_dirs(tmp_path)
    async with await local.create(SandboxSpec(image=base_images)) as session:
        assert session.private_binds
        await session.exec("mkdir -p /tests /logs/verifier && echo agent > /tests/mine")
        await _no_more_privilege(session, binds=binds)
        seen = await session.exec_fresh(
            "ls /tests; bash /tests/test.sh; touch /tests/x 2>/dev/null || echo read-only;"
            " echo 1 > /logs/verifier/reward.txt; mount -t tmpfs t /mnt 2>/dev/null"
            " || echo no-mount",
            binds=binds,
        )
        assert seen.output.split() == ["test.sh", "from-host", "read-only", "no-mount"], seen.output
        assert (tmp_path / "verifier" / "reward.txt").read_text() == "1\n"
        # The sandbox's own view is untouched.
        assert (await session.exec("ls /tests /logs/verifier")).output.split() == [
            "/logs/verifier:",
            "/tests:",
            "mine",
        ]


async def test_private_directories_cannot_be_moved_away_under_the_process(
    local, base_images, tmp_path
):
    """A private mount sits on an entry the sandbox shares: renamed from the sandbox, the mount would
    follow it (``mv /tests x && mkdir /tests`` would show the agent's tests). While the process runs,
    its paths and every directory above them are pinned (EBUSY in the sandbox); after, they are not."""
    binds = _scoring_dirs(tmp_path)
    attack = (
        "mv /tests /tests.gone; rmdir /tests; mv /logs /logs.gone; mv /logs/verifier /v;"
        " rm -rf /logs; ln -sfn /tmp /logs/verifier; umount -l /tests || echo no-umount;"
        " umount -l /logs || echo no-umount"
    )
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("mkdir -p /tests /logs/verifier")
        mounts_before = (await session.exec("cat /proc/self/mountinfo | wc -l")).output

        # Generous bounds: on a loaded machine the kubernetes backend takes a minute or more to
        # stage the private folders in its verifier container before the process starts.
        async def agent() -> str:
            await session.exec("until [ -e /tmp/started ]; do sleep 0.1; done", 300)
            tried = await session.exec(f"{{ {attack}; }} 2>&1; touch /tmp/tried", 60)
            return tried.output

        tests, tried = await asyncio.gather(
            session.exec_fresh(
                "touch /tmp/started; until [ -e /tmp/tried ]; do sleep 0.1; done; bash /tests/test.sh",
                binds=binds,
                timeout=360,
            ),
            agent(),
        )
        assert tests.output == "from-host\n", (tests, tried)
        assert tried.count("Device or resource busy") >= 5, tried
        assert tried.count("no-umount") == 2, tried  # no capability to unmount a pin
        assert (await session.exec("cat /proc/self/mountinfo | wc -l")).output == mounts_before
        moved = await session.exec("mv /tests /tests.gone && mv /logs /logs.gone && echo moved")
        assert moved.output == "moved\n"


async def test_a_private_directory_behind_a_symbolic_link_is_refused(local, base_images, tmp_path):
    """/logs a link to a directory the agent controls: the private mount would land there; refused,
    and /tests, pinned before /logs was found out, is left unpinned."""
    binds = _scoring_dirs(tmp_path)
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec(
            "mkdir /tests; rm -rf /logs; mkdir -p /tmp/elsewhere/verifier; ln -s /tmp/elsewhere /logs"
        )
        refused = await session.exec_fresh("echo 1 > /logs/verifier/reward.txt", binds=binds)
        assert refused.exit_code == 125 and "/logs is not a directory" in refused.output
        assert (await session.exec("rmdir /tests && echo removed")).output == "removed\n"
        assert not (tmp_path / "verifier" / "reward.txt").exists()


async def test_private_directories_are_unpinned_when_the_process_times_out(
    local, base_images, tmp_path
):
    (tmp_path / "tests").mkdir()
    binds = {"/tests": (str(tmp_path / "tests"), True)}
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("mkdir -p /tests")
        result = await session.exec_fresh("sleep 98763", binds=binds, timeout=3)
        assert result.timed_out
        assert (await session.exec("rmdir /tests && echo removed")).output == "removed\n"


async def test_frozen_system_folders_are_read_only_for_all_but_the_tests(
    local, base_images, tmp_path
):
    """While scoring, the services the agent left running cannot replace what the tests run; the tests
    themselves (a fresh process with private directories) still install where they like."""
    (tmp_path / "verifier").mkdir()
    binds = {"/logs/verifier": (str(tmp_path / "verifier"), False)}
    write = "touch /usr/local/bin/x-{0} /etc/x-{0} 2>&1 && echo wrote"
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("mkdir -p /logs/verifier")
        mounts_before = (await session.exec("cat /proc/self/mountinfo | wc -l")).output
        async with session.system_paths_frozen():
            agent = await session.exec(f"umount -l /usr || echo no-umount; {write.format('agent')}")
            assert "no-umount" in agent.output, agent.output  # the freeze cannot be undone inside
            assert "Read-only file system" in agent.output and "wrote" not in agent.output
            plain = await session.exec_fresh(write.format("plain"))  # no binds: not the tests
            assert "Read-only file system" in plain.output, plain.output
            tests = await session.exec_fresh(write.format("tests"), binds=binds)
            assert tests.output == "wrote\n", tests.output
        assert (await session.exec("ls /usr/local/bin/x-* /etc/x-*")).output.split() == [
            "/etc/x-tests",
            "/usr/local/bin/x-tests",
        ]
        assert (await session.exec(write.format("later"))).output == "wrote\n"
        assert (await session.exec("cat /proc/self/mountinfo | wc -l")).output == mounts_before


async def test_a_process_with_private_directories_runs_as_the_user_asked_for(
    local, base_images, tmp_path
):
    """A task's verifier user: its ids come from the sandbox's own /etc/passwd; a user the
    sandbox does not know is refused (exit 126) rather than run as root."""
    (tmp_path / "verifier").mkdir()
    binds = {"/logs/verifier": (str(tmp_path / "verifier"), False)}
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("mkdir -p /logs/verifier")
        ran = await session.exec_fresh("id -un; id -u", binds=binds, user="nobody")
        assert ran.output.split() == ["nobody", "65534"], ran.output
        by_uid = await session.exec_fresh("id -u", binds=binds, user="4242")
        assert by_uid.output.split() == ["4242"], by_uid.output
        refused = await session.exec_fresh("id -un", binds=binds, user="no-such-user")
        assert refused.exit_code == 126
        assert "cannot run as user 'no-such-user'" in refused.output


async def _no_more_privilege(session, **fresh_args) -> None:
    """The fresh process's user, capabilities, no_new_privs, seccomp and cgroups are the agent's shell's."""
    shell = _fields((await session.exec(STATUS)).output)
    fresh = _fields((await session.exec_fresh(STATUS, **fresh_args)).output)
    for key in ("Uid", "Gid", "Groups"):
        assert fresh[key].split() == shell[key].split(), key
    for key in CAPABILITY_SETS:  # every capability of the fresh process, the shell has too
        extra = int(fresh[key], 16) & ~int(shell[key], 16)
        assert extra == 0, f"{key}: the fresh process holds {extra:#x} more"
    assert int(fresh["CapEff"], 16) == int(shell["CapEff"], 16)  # and it is not crippled either
    assert int(fresh["NoNewPrivs"]) >= int(shell["NoNewPrivs"]) == 1
    assert fresh["Seccomp"].strip() == shell["Seccomp"].strip() == "2"  # filtered, like the agent
    assert int(fresh["Seccomp_filters"]) >= int(shell["Seccomp_filters"]) >= 1
    cgroups = "cat /proc/self/cgroup"
    assert (await session.exec_fresh(cgroups, **fresh_args)).output == (
        await session.exec(cgroups)
    ).output
    # Same pid namespace: the fresh process sees the agent's processes (and they it).
    init = "cat /proc/1/cmdline"
    assert (await session.exec_fresh(init, **fresh_args)).output == (
        await session.exec(init)
    ).output


async def test_a_fresh_process_shares_no_state_with_the_agents_shell(local, base_images):
    spec = SandboxSpec(image=base_images, env={"FROM_SPEC": "spec"})
    async with await local.create(spec) as session:
        await session.exec(
            "cd /tmp && export BASH_ENV=/tmp/rc AGENT_VAR=1 PATH=/tmp/bin:$PATH; echo 'echo from-bash-env' > /tmp/rc;"
            " bash() { echo from-function; }; export -f bash; alias ls='echo from-alias'"
        )
        result = await session.exec_fresh(
            "pwd; echo ${AGENT_VAR:-unset} $FROM_SPEC $PIP_BREAK_SYSTEM_PACKAGES $CALLER; echo $PATH; bash -c 'echo real'",
            env={"CALLER": "caller"},
        )
        assert result.exit_code == 0
        assert result.output.splitlines() == [
            "/app",
            "unset spec 1 caller",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "real",
        ]
        assert (await session.exec_fresh("pwd", workdir="/tmp")).output == "/tmp\n"
        assert (await session.exec_fresh("echo out; echo err >&2; exit 7")).exit_code == 7
        # The agent's shell is untouched by all of this.
        assert (await session.exec("pwd; echo $AGENT_VAR")).output == "/tmp\n1\n"


async def test_a_fresh_process_past_its_timeout_is_killed_with_its_children(local, base_images):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        result = await session.exec_fresh("echo started; sleep 98765 & sleep 98764", timeout=5)
        assert (
            result.timed_out and result.exit_code is None and result.output.startswith("started\n")
        )
        assert (await session.exec("pgrep -f 'sleep 9876[45]' || echo none")).output == "none\n"


async def test_a_fresh_process_whose_caller_is_cancelled_is_killed_with_its_children(
    local, base_images
):
    """A trial cancelled mid-test (its TaskGroup failed, the run was interrupted) leaves nothing running."""
    async with await local.create(SandboxSpec(image=base_images)) as session:
        assert await left_after_cancelling(session, 98757) == 0


# The pid line 3 s after the wrapper became the command: what a loaded host's ``podman exec``
# relay can do. The command's arguments no longer carry the mark; a forked subshell does.
LATE_PID_LINE = '(sleep 3; printf "%s %d\\n" "$1" "$$") & shift; exec "$@"'


async def test_a_cancelled_fresh_process_is_killed_when_its_pid_line_comes_late(
    local, base_images, monkeypatch
):
    """The backends that learn a fresh process's pid from what it prints (podman exec, the
    kubernetes exec API) still find it when the caller gives up before the line has come."""
    from termrl.sandbox import kubernetes, podman_sandbox

    if local.backend.name == "bwrap":
        pytest.skip("bwrap starts fresh processes itself: no pid line")

    def late(mark: str, argv: list[str]) -> list[str]:
        return [
            "/bin/bash",
            "--noprofile",
            "--norc",
            "-c",
            LATE_PID_LINE,
            "termrl-fresh",
            mark,
            *argv,
        ]

    monkeypatch.setattr(podman_sandbox, "pid_line_argv", late)
    monkeypatch.setattr(kubernetes, "pid_line_argv", late)
    async with await local.create(SandboxSpec(image=base_images)) as session:
        assert await left_after_cancelling(session, 98754) == 0


async def test_a_background_child_that_keeps_the_output_open_does_not_hold_the_caller(
    local, base_images, tmp_path
):
    """A test script that leaves a server running (``server &``, its output still the script's) is done
    when the script is, as under ``docker exec``: not at its timeout, scored as timed out."""
    binds = _scoring_dirs(tmp_path)
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("mkdir -p /tests /logs/verifier")
        for private in ({}, binds):
            result = await session.exec_fresh(
                "sleep 98756 & echo started", timeout=120, binds=private or None
            )
            assert (result.output, result.exit_code, result.timed_out) == ("started\n", 0, False)


async def test_agent_stopped_freezes_leftovers_but_not_services(local, base_images):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec(
            "setsid nohup python3 -m http.server 8124 >/dev/null 2>&1 & echo $! > /tmp/service"
        )
        await session.exec(
            "nohup bash -c 'while :; do date +%s%N > /tmp/tick; sleep 0.01; done' >/dev/null 2>&1 &"
            " echo $! > /tmp/loop"
        )
        await session.exec(
            "for i in $(seq 50); do curl -fs http://127.0.0.1:8124/ >/dev/null && break; sleep 0.1; done"
        )
        state = "for p in $(cat /tmp/service /tmp/loop); do grep State: /proc/$p/status | cut -f2 | cut -c1; done"
        async with session.agent_stopped():
            during = await session.exec_fresh(
                f"{state}; curl -fsS -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:8124/"
            )
            service, loop, answer = during.output.split()
            assert (service != "T", loop, answer) == (True, "T", "200"), during.output
            stopped_tick = (await session.exec_fresh("cat /tmp/tick")).output
            assert (
                await session.exec_fresh("sleep 0.2; cat /tmp/tick")
            ).output == stopped_tick  # frozen
        after = await session.exec(state)
        assert "T" not in after.output.split()


async def test_a_service_still_starting_when_scoring_begins_is_not_stopped(local, base_images):
    """An agent may start a server and say done at once; the server listens seconds later on a
    loaded machine. Scoring must not freeze it on the way (a correct solution would fail)."""
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec(
            "setsid nohup bash -c 'sleep 3; exec python3 -m http.server 8125' >/dev/null 2>&1 &"
        )
        async with session.agent_stopped():
            answer = await session.exec_fresh(
                "curl -fsS -o /dev/null -w '%{http_code}' http://127.0.0.1:8125/"
            )
        assert answer.output == "200", answer.output


async def test_scoring_a_fresh_sandbox_waits_for_no_process_of_its_own(
    local, base_images, monkeypatch
):
    """The sandbox's supervisor and the agent's shell are as young as the sandbox (seconds, in verify or a
    short episode) and never become services: nothing is waited for when the agent left nothing running."""
    from termrl.sandbox import procs

    seen: list[list[int]] = []

    def recording(init: int, grace_sec: float, settled=()) -> list[int]:
        young = real(init, grace_sec, settled)
        seen.append(young)
        return young

    real = procs.young_processes
    monkeypatch.setattr(procs, "young_processes", recording)
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("echo ready")
        async with session.agent_stopped():
            pass
        assert seen == [[]]
        await session.exec(
            "setsid nohup sleep 30 >/dev/null 2>&1 &"
        )  # young, may still become a server
        seen.clear()
        async with session.agent_stopped():
            pass
        assert seen[0] != []
