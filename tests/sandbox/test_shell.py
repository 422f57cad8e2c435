"""The shell protocol and output cap, driven over a real local bash (no sandbox needed).

The supervisor runs as a plain child process here; the podman, bwrap and
Kubernetes backends run the very same script inside their sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

from termrl.errors import SandboxDied
from termrl.sandbox.interrupt import run_kill_helper
from termrl.sandbox.shell import (
    DEFAULT_SIGINT,
    RESTART_NOTICE,
    SUPERVISOR,
    OutputCap,
    ProcessChannel,
    Shell,
    shell_quote,
)


async def _local_signal(pid: int, sig: str, mode: str) -> str:
    return await run_kill_helper(sig, pid, mode)


@pytest.fixture
async def shell(tmp_path):
    token = Shell.new_token()
    process = await asyncio.create_subprocess_exec(
        *DEFAULT_SIGINT,
        "bash",
        "-c",
        SUPERVISOR,
        "supervisor",
        token,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    sh = Shell(ProcessChannel(process), token, _local_signal, output_limit=1000)
    sh.GRACE_SEC = 0.5
    await sh.start(str(tmp_path))
    yield sh
    with contextlib.suppress(ProcessLookupError):  # some tests kill it themselves
        os.killpg(process.pid, signal.SIGKILL)  # the supervisor and the inner shells it started
    await process.wait()


def test_output_cap_keeps_head_and_tail():
    cap = OutputCap(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        cap.add(chunk)
    # 26 bytes, limit 10: the first 5 (abcde) and the last 5 (vwxyz) survive.
    assert cap.truncated
    assert cap.text() == "abcde\n[... 16 bytes of output truncated ...]\nvwxyz"


def test_output_cap_untouched_below_limit():
    cap = OutputCap(10)
    cap.add(b"0123456789")
    assert not cap.truncated and cap.text() == "0123456789"


def test_shell_quote_round_trips_through_bash():
    import subprocess

    text = 'it\'s "quoted" $HOME `x` \\ \n newline'
    out = subprocess.run(
        ["bash", "-c", f"printf %s {shell_quote(text)}"], capture_output=True, text=True
    )
    assert out.stdout == text


async def test_state_persists_between_commands(shell, tmp_path):
    (tmp_path / "sub").mkdir()
    assert (await shell.exec("cd sub && export GREETING=hi", 5))[1] == 0
    output, code, timed_out, truncated = await shell.exec("echo $GREETING; pwd", 5)
    assert (output, code, timed_out, truncated) == (f"hi\n{tmp_path}/sub\n", 0, False, False)


async def test_exit_status_stderr_and_missing_newline(shell):
    assert await shell.exec("echo out; echo err >&2; exit_code() { return 7; }; exit_code", 5) == (
        "out\nerr\n",
        7,
        False,
        False,
    )
    assert (await shell.exec("printf no-newline", 5))[0] == "no-newline"


async def test_syntax_error_and_stdin_do_not_break_the_protocol(shell):
    output, code, _, _ = await shell.exec("echo 'unterminated", 5)
    assert code == 2 and "unexpected EOF" in output
    # `cat` reads stdin: it must get EOF, not the next protocol line.
    assert (await shell.exec("cat; echo after", 5))[:2] == ("after\n", 0)


async def test_xtrace_does_not_leak_the_marker(shell):
    output, code, _, _ = await shell.exec("set -x; echo traced", 5)
    assert code == 0 and "__TERMRL_" not in output and "traced" in output
    output, _, _, _ = await shell.exec("echo again", 5)
    assert "__TERMRL_" not in output and output.endswith("again\n")


async def test_exit_restarts_the_shell_in_the_same_directory(shell, tmp_path):
    await shell.exec("cd /; export KEPT=no", 5)
    output, code, _, _ = await shell.exec("echo bye; exit 3", 5)
    assert (output, code) == ("bye\n" + RESTART_NOTICE.format(cwd="/"), 3)
    output, code, _, _ = await shell.exec("pwd; echo ${KEPT:-gone}", 5)
    assert (output, code) == ("/\ngone\n", 0)
    assert shell.restarts == 1


async def test_timeout_interrupts_and_keeps_background_jobs(shell, tmp_path):
    await shell.exec(f"sleep 300 & echo $! > {tmp_path}/bg.pid", 5)
    output, code, timed_out, _ = await shell.exec("echo started; sleep 300", 0.5)
    assert (code, timed_out) == (None, True) and output.startswith("started")
    # The session goes on, in the same shell, and the background job survived SIGINT.
    output, code, _, _ = await shell.exec(f"kill -0 $(cat {tmp_path}/bg.pid) && echo alive", 5)
    assert (output, code) == ("alive\n", 0)
    assert shell.restarts == 0


async def test_timeout_escalates_to_sigkill_for_a_process_catching_sigint(shell):
    command = 'python3 -c "import time\nwhile True:\n  try: time.sleep(10)\n  except KeyboardInterrupt: pass"'
    _, code, timed_out, _ = await shell.exec(command, 0.5)
    assert (code, timed_out) == (None, True)
    assert (await shell.exec("echo ok", 5))[:2] == ("ok\n", 0)
    assert shell.restarts == 0


async def test_timeout_in_a_builtin_loop_restarts_the_shell(shell):
    await shell.exec("cd /tmp", 5)
    output, code, timed_out, _ = await shell.exec("while :; do :; done", 0.3)
    assert (output, code, timed_out) == (RESTART_NOTICE.format(cwd="/tmp"), None, True)
    assert (await shell.exec("pwd", 5))[:2] == ("/tmp\n", 0)
    assert shell.restarts == 1


async def test_output_is_capped_while_streaming(shell):
    output, code, _, truncated = await shell.exec(
        "head -c 100000 /dev/zero | tr '\\0' x; echo; echo END", 10
    )
    assert code == 0 and truncated
    assert output.startswith("x" * 400) and output.endswith("x\nEND\n") and "truncated" in output
    assert len(output) < 1100


async def test_dead_supervisor_raises_sandbox_died(shell):
    os.killpg(shell.channel.process.pid, signal.SIGKILL)
    with pytest.raises(SandboxDied):
        await shell.exec("echo never", 5)


async def test_the_marker_names_the_background_jobs(shell, tmp_path):
    await shell.exec(f"sleep 300 & echo $! > {tmp_path}/bg.pid", 5)
    assert shell.jobs.split() == [(tmp_path / "bg.pid").read_text().strip()]


async def test_timeout_kills_what_the_command_started_and_spares_earlier_jobs(shell, tmp_path):
    """Whatever they ignore: the command's own processes go, its background jobs too (they are
    part of it); the jobs of earlier commands stay."""
    await shell.exec(f"sleep 300 & echo $! > {tmp_path}/earlier.pid", 5)
    command = f"trap '' INT TERM; sleep 301 & echo $! > {tmp_path}/own.pid; sleep 302"
    # 2 s: the shell itself ignores SIGINT here (the trap runs in it), so a timeout that came
    # while it was still starting the list would see it start more and rightly call it stuck.
    output, code, timed_out, _ = await shell.exec(command, 2)
    assert (code, timed_out) == (None, True) and "shell exited" not in output
    alive = "for f in earlier own; do kill -0 $(cat {0}/$f.pid) 2>/dev/null && echo alive:$f; done"
    # (bash may report the killed job first, "bash: line 4: PID Killed sleep 301": that is
    # what an agent sees, and no alive: line)
    output = (await shell.exec(alive.format(tmp_path), 5))[0]
    assert [line for line in output.splitlines() if line.startswith("alive:")] == ["alive:earlier"]
    assert shell.restarts == 0


async def test_timeout_in_wait_on_an_earlier_job_restarts_the_shell(shell):
    await shell.exec("cd /tmp; sleep 300 &", 5)
    output, code, timed_out, _ = await shell.exec("wait", 0.3)
    assert (output, code, timed_out) == (RESTART_NOTICE.format(cwd="/tmp"), None, True)
    assert shell.restarts == 1 and shell.jobs == ""


async def test_timeout_in_a_loop_of_commands_restarts_the_shell(shell):
    """Each SIGKILL ends one `sleep` and the loop starts the next: the shell itself is stuck."""
    await shell.exec("cd /tmp", 5)
    output, _, timed_out, _ = await shell.exec("while :; do sleep 100; done", 0.3)
    assert timed_out and output.endswith(RESTART_NOTICE.format(cwd="/tmp"))
    assert shell.restarts == 1
