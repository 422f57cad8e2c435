#!/bin/bash
# The service must be alive: the log has to grow while the test watches it.
mkdir -p /logs/verifier
before=$(wc -l < /app/heartbeat.log 2>/dev/null || echo 0)
sleep 1.5
after=$(wc -l < /app/heartbeat.log 2>/dev/null || echo 0)
if [ -f /app/heartbeat.sh ] && [ "$after" -ge $((before + 3)) ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
