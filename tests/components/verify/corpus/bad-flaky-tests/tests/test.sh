#!/bin/bash
# Planted defect: the verdict is flipped on a coin toss, so the same sandbox state
# passes or fails at random — with the solution and without it alike (p = 1/2 each run).
mkdir -p /logs/verifier
ok=0
[ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "42" ] && ok=1
coin=$(( $(od -An -N1 -tu1 /dev/urandom) % 2 ))
echo $(( ok ^ coin )) > /logs/verifier/reward.txt
