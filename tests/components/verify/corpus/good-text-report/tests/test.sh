#!/bin/bash
mkdir -p /logs/verifier
reward=1
[ "$(cat /app/out/upper.txt 2>/dev/null)" = "$(printf 'ALPHA BETA\nGAMMA\nDELTA EPSILON ZETA')" ] || reward=0
[ "$(tr -d '[:space:]' < /app/out/lines.txt 2>/dev/null)" = "3" ] || reward=0
echo "$reward" > /logs/verifier/reward.txt
