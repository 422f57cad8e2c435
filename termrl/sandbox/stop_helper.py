"""``STOP_HELPER``: the script that stops an agent's leftover processes from inside a sandbox.

The kubernetes backend runs it in the pod (there is no host to act from); podman runs it where
its host-side stop cannot. Kept apart from either backend: both use it.
"""

from __future__ import annotations

__all__ = ["STOP_HELPER"]

# Runs inside the pod: stop-helper stop [GRACE [SHELL_PID]] | stop-helper cont PID:START...
# stop: first waits, at most GRACE seconds (integer), while a running process that is not a
# service is younger than GRACE: a server the agent started last may still be on its way to
# listening (termrl.sandbox.procs.SERVICE_GRACE_SEC, the host backends' wait; SHELL_PID, the agent's
# shell, is never waited for: it is as young as the pod). Then SIGSTOPs
# every process but pid 1, this helper (and what it starts) and the services (holders of a
# listening socket, and their descendants: termrl.sandbox.procs's rule), in rounds until a
# round finds nothing new; prints PID:START of each process it stopped.
# cont: SIGCONT each PID whose start time (field 22 of its stat) is still START.
STOP_HELPER = r"""
me=$$
start_of() { local line; read -r line 2>/dev/null < "/proc/$1/stat" || return 1; set -- ${line##*) }; REPLY=${20}; }
if [ "$1" = cont ]; then
  shift
  for entry in "$@"; do
    start_of "${entry%%:*}" && [ "$REPLY" = "${entry#*:}" ] && kill -CONT "${entry%%:*}" 2>/dev/null
  done
  exit 0
fi
holds_listener() {
  local line ino
  while read -r line; do
    [[ $line == *"socket:["* ]] || continue
    ino=${line##*socket:[}; ino=${ino%]}
    [ -n "${listening[$ino]}" ] && return 0
  done < <(ls -l "/proc/$1/fd" 2>/dev/null)
  return 1
}
scan() {  # the process table (state, ppid, start) and the services, as of now
  declare -gA listening=() ppid=() state=() start=() service=()
  local table want st inode flags p d line
  for table in tcp tcp6 udp udp6; do
    want=0A; [ "${table#udp}" != "$table" ] && want=07
    { read -r _; while read -r _ _ _ st _ _ _ _ _ inode _; do
        [ "$st" = "$want" ] && listening[$inode]=1
      done; } 2>/dev/null < "/proc/net/$table"
  done
  { read -r _; while read -r _ _ _ flags _ _ inode _; do
      (( 16#$flags & 0x10000 )) && listening[$inode]=1
    done; } 2>/dev/null < /proc/net/unix
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    read -r line 2>/dev/null < "$d/stat" || continue
    set -- ${line##*) }
    state[$p]=$1 ppid[$p]=$2 start[$p]=${20}
  done
  for p in "${!state[@]}"; do holds_listener "$p" && service[$p]=1; done
}
stoppable() {  # running, not pid 1, not this helper's, not a service's
  local q=$1
  [ "$1" = 1 ] && return 1
  case ${state[$1]} in T|t|Z|X) return 1 ;; esac
  while [ -n "$q" ] && [ "$q" != 0 ] && [ "$q" != 1 ]; do
    [ "$q" = "$me" ] || [ -n "${service[$q]}" ] && return 1
    q=${ppid[$q]}
  done
  return 0
}
uptime_cs() { local up; read -r up _ < /proc/uptime; REPLY=$(( ${up%.*} * 100 + 10#${up#*.} )); }
grace_cs=$(( ${2:-0} * 100 ))
declare -A settled  # the agent's shell: as young as the pod, never a service starting up
for p in "${@:3}"; do settled[$p]=1; done
idle_of_init() {  # pid 1's own `sleep 3600` (IDLE_COMMAND): as young as the pod too
  local args
  [ "${ppid[$1]}" = 1 ] && mapfile -d '' args 2>/dev/null < "/proc/$1/cmdline" && [ "${args[*]}" = "sleep 3600" ]
}
exec {pause}<> <(:)  # read -t on a pipe nobody writes: a sleep without an external binary
uptime_cs; until_cs=$(( REPLY + grace_cs ))
while (( grace_cs > 0 )); do
  scan; uptime_cs; young=0
  for p in "${!state[@]}"; do  # /proc start times are in USER_HZ ticks, 100 a second
    [ -z "${settled[$p]}" ] && ! idle_of_init "$p" && stoppable "$p" && (( REPLY - start[$p] < grace_cs )) \
      && { young=1; break; }
  done
  (( young && REPLY < until_cs )) || break
  read -t 0.2 -u "$pause" _
done
declare -A stopped
for round in 1 2 3 4 5 6 7 8 9 10; do
  scan
  fresh=0
  for p in "${!state[@]}"; do
    [ -n "${stopped[$p]}" ] && continue
    stoppable "$p" || continue
    kill -STOP "$p" 2>/dev/null && { stopped[$p]=1; echo "$p:${start[$p]}"; fresh=1; }
  done
  ((fresh)) || break
done
exit 0
"""
