#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/home/user/projects/ledger-tools/sum_amounts.py
if [ -f "$f" ] && [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "564e2c6486d2e1f71382093b9497dcc229e1a4f2c6e0518c40e67026ad5483a4" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
