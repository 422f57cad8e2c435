#!/bin/bash
mkdir -p /logs/verifier
if python3 - <<'PY'
import sys
try:
    v = float(open("/srv/reports/q3_total.txt").read().strip())
except Exception:
    sys.exit(1)
sys.exit(0 if abs(v - 19827.47) < 0.006 else 1)
PY
then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
