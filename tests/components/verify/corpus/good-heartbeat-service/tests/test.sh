#!/bin/bash
# The service must be alive: a process running /app/heartbeat.sh, and its log begun. Its
# growth cannot be watched: scoring stops every process of the agent's that holds no
# listening socket while the tests run (docs/sandboxes.md).
mkdir -p /logs/verifier
alive=0
for p in /proc/[0-9]*; do
  # [/] keeps this grep from finding itself
  if tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q '[/]app/heartbeat[.]sh'; then
    alive=1
  fi
done
if [ "$alive" = 1 ] && [ -s /app/heartbeat.log ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
