#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/home/user/error_count.txt
if [ -f "$f" ] && [ "$(tr -d '[:space:]' < "$f")" = "6" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
