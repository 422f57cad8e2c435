"""How a timed-out command is stopped: the kill helper, its report, and when the shell is stuck.

A command is the processes the shell started while running it. The marker the
shell prints after each command names its children at that moment, its
background jobs (``Shell.jobs``); when the next command times out, everything
else below the shell is that command: its foreground processes, what they
started, and the background jobs it started itself. The timeout then goes,
whatever any process ignores:

1. SIGINT to the command's processes (``KILL_HELPER INT:MS``). When one of them
   handles SIGINT (a Python script, a bash waiting for a child), it gets
   ``Shell.GRACE_SEC`` to clean up, and the same helper run then SIGKILLs what
   still runs; otherwise there is nothing to wait for.
2. SIGKILL to the command's processes (``KILL_HELPER KILL``), repeated until the
   shell prints its marker. Each round, SIGINT's too, reports on the shell, and
   ``StuckShell`` reads the reports.
3. Only a shell that is itself stuck is killed with everything it started
   (``KILL_HELPER KILL all``), and a new one started.

"Stuck" is read from what the shell does, never from how long it is silent:
it burns CPU itself (a builtin loop such as ``while :; do :; done``), it sleeps
in ``wait`` with no process of the command left to reap, twice in a row (it
waits on jobs the timeout leaves alone), or it keeps starting new processes (a
loop of external commands). A shell that is merely slow to report, because a loaded machine has
not scheduled it since its child died, does none of those: its CPU time stands
still and its dead child waits to be reaped. It is never killed for that, however
long it takes (up to ``Shell.BACKSTOP_SEC``, for a shell that shows no sign at all).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

__all__ = ["KILL_HELPER", "HelperReport", "StuckShell", "run_kill_helper"]

# Runs where the shell's /proc is (inside the sandbox for podman and Kubernetes, on the host for
# bwrap), bash only (no procps): kill-helper SIG ROOT MODE. ROOT is the shell's pid as the helper
# sees it. SIG "INT:MS": SIGINT, and SIGKILL after MS milliseconds to what handles it and still runs
# (one run: a podman exec costs a third of a second). MODE "cmd PID...": the command's processes, i.e. ROOT's descendants except the subtrees of
# the children named (pids in the shell's own pid namespace: NSpid's last field); "all": ROOT first
# (a shell killed first cannot print a marker afterwards), then every descendant.
# Prints one line: the shell's state, CPU ticks (utime + stime, 1/100 s), wait channel, zombie
# children, how many signalled processes handle SIGINT, and the pids signalled.
KILL_HELPER = r"""
exec 2>/dev/null
sig=$1 root=$2 mode=$3 grace=0
case $sig in INT:*) grace=${sig#INT:} sig=INT ;; esac
declare -A keep
if [ "$mode" != all ]; then
  set -- $mode
  shift
  for p; do keep[$p]=1; done
fi
scan() {  # found: the processes to signal
  local d line rest c ns k v p todo=()
  kids=() found=()
  for d in /proc/[0-9]*; do
    read -r line < "$d/stat" || continue
    rest=${line##*) }
    set -- $rest
    kids[$2]+=" ${d#/proc/}"
  done
  if [ "$mode" = all ]; then
    found=("$root") todo=(${kids[$root]})
  else
    for c in ${kids[$root]}; do
      ns=$c
      while read -r k v; do
        [ "$k" = NSpid: ] && { ns=${v##*[[:space:]]}; break; }
      done < "/proc/$c/status"
      [ -n "${keep[$ns]}" ] || todo+=("$c")
    done
  fi
  while ((${#todo[@]})); do
    p=${todo[0]}; todo=("${todo[@]:1}"); found+=("$p"); todo+=(${kids[$p]})
  done
}
send() {  # $1 to the live ones among found: signalled, and how many handle SIGINT (catching)
  local p line rest k v
  signalled=()
  for p in "${found[@]}"; do
    read -r line < "/proc/$p/stat" || continue
    rest=${line##*) }
    [ "${rest%% *}" = Z ] && continue
    if [ "$1" = INT ]; then
      while read -r k v; do
        [ "$k" = SigCgt: ] && { ((16#$v & 2)) && ((catching += 1)); break; }
      done < "/proc/$p/status"
    fi
    kill -s "$1" "$p" && signalled+=("$p")
  done
}
alive() {  # whether a signalled process still runs
  local p line rest
  for p in "${signalled[@]}"; do
    read -r line < "/proc/$p/stat" || continue
    rest=${line##*) }
    [ "${rest%% *}" = Z ] || return 0
  done
  return 1
}
now_ms() {
  if [ -n "$EPOCHREALTIME" ]; then ms=${EPOCHREALTIME/[.,]/}; ms=$((10#$ms / 1000)); else ms=$((SECONDS * 1000)); fi
}
declare -A kids
catching=0
scan
send "$sig"
if ((grace > 0 && catching > 0)); then  # INT:ms: they may clean up that long, then SIGKILL
  now_ms; end=$((ms + grace))
  while alive && now_ms && ((ms < end)); do sleep 0.05 || break; done
  alive && { scan; send KILL; }
fi
if [ "$mode" = all ]; then  # a new shell starts once what the old one started is dead, not dying
  now_ms; end=$((ms + 2000))
  while alive && now_ms && ((ms < end)); do sleep 0.02 || break; done
fi
zombies=0
for c in ${kids[$root]}; do
  read -r line < "/proc/$c/stat" || continue
  rest=${line##*) }
  [ "${rest%% *}" = Z ] && ((zombies += 1))
done
state=- cpu=0 wchan=
if read -r line < "/proc/$root/stat"; then
  rest=${line##*) }
  set -- $rest
  state=$1 cpu=$((${12} + ${13}))
  read -r wchan < "/proc/$root/wchan"
fi
echo "$state $cpu ${wchan:--} $zombies $catching ${signalled[*]}"
exit 0
"""

WAIT_CHANNELS = frozenset({"do_wait", "kernel_wait4", "kernel_waitid", "__do_sys_wait4"})
"""Where a process sleeps in wait4/waitid (``/proc/PID/wchan``): a shell there waits for a child."""


@dataclass(frozen=True)
class HelperReport:
    """What one ``KILL_HELPER`` run saw of the shell, right after it signalled."""

    state: str
    """The shell's process state (R, S, D, T, Z); "-" once it is gone."""
    cpu_sec: float
    """CPU time the shell has used so far (user + system)."""
    wchan: str
    """What the shell sleeps in ("-" where the kernel does not say)."""
    zombies: int
    """Children of the shell that died and are not reaped yet: the shell has work pending."""
    catching: int
    """How many of the signalled processes handle SIGINT (only counted for SIGINT)."""
    signalled: frozenset[int]
    """The processes the signal reached (not the ones it could not: another user's)."""

    @classmethod
    def parse(cls, text: str) -> HelperReport | None:
        """The report in the helper's output; None when it printed none (the sandbox is going)."""
        for line in reversed(text.splitlines()):
            fields = line.split()
            if len(fields) >= 5 and fields[1].isdigit() and all(f.isdigit() for f in fields[3:]):
                return cls(
                    state=fields[0],
                    cpu_sec=int(fields[1]) / 100,  # /proc reports USER_HZ ticks, 100 a second
                    wchan=fields[2],
                    zombies=int(fields[3]),
                    catching=int(fields[4]),
                    signalled=frozenset(int(f) for f in fields[5:]),
                )
        return None

    @property
    def waits_for_nothing_of_the_command(self) -> bool:
        """The shell sleeps in ``wait``, and no process of the command is left to end or be reaped:
        it waits on jobs the timeout leaves alone."""
        return (
            self.state == "S"
            and self.wchan in WAIT_CHANNELS
            and not self.signalled
            and self.zombies == 0
        )


class StuckShell:
    """Reads the reports of one timeout's rounds (SIGINT, then SIGKILLs) and says when the shell
    itself is stuck."""

    def __init__(self, cpu_sec: float, respawns: int):
        self.cpu_sec = cpu_sec
        """CPU the shell may burn after the first report (the SIGINT's): more is a loop in the shell
        itself (a shell that only reports its command's end uses microseconds)."""
        self.respawns = respawns
        """How many later rounds may find processes that the earlier rounds had not seen."""
        self._first_cpu: float | None = None
        self._seen: set[int] = set()
        self._new_rounds = 0
        self._waiting_rounds = 0

    def stuck(self, report: HelperReport | None) -> bool:
        """Whether this report shows the shell stuck; a missing report shows nothing."""
        if report is None or report.state == "-":
            return False  # the shell is gone: its supervisor reports that on the channel
        if self._first_cpu is None:
            self._first_cpu = report.cpu_sec
        elif report.signalled - self._seen:
            self._new_rounds += 1  # the shell started more processes after it was interrupted
        self._seen |= report.signalled
        # Twice in a row: a shell seen between two commands of a list, just before it forks the
        # next one, may already sleep in wait while the helper found no process of its.
        waiting = report.waits_for_nothing_of_the_command
        self._waiting_rounds = self._waiting_rounds + 1 if waiting else 0
        return (
            report.cpu_sec - self._first_cpu >= self.cpu_sec
            or self._new_rounds >= self.respawns
            or self._waiting_rounds >= 2
        )


async def run_kill_helper(sig: str, root: int, mode: str) -> str:
    """Run ``KILL_HELPER`` here, on this host's /proc (bwrap, tests); its report line."""
    helper = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        KILL_HELPER,
        "kill-helper",
        sig,
        str(root),
        mode,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await helper.communicate()
    return out.decode(errors="replace")
