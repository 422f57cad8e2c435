#!/bin/bash
mkdir -p /logs/verifier
reward=1
[ "$(cat /app/deploy.env 2>/dev/null)" = "$(printf 'PORT=8443\nDB_HOST=db.internal')" ] || reward=0
echo "$reward" > /logs/verifier/reward.txt
