#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/data/warehouse/skus_upper.txt
expected=$(cat <<'EOF'
AB-1042-BLK
AB-1042-WHT
CX-220-RED
CX-220-BLU
DD-9001
LM-77-GRN-XL
LM-77-GRN-M
PT-3300-S
QA-0042
ZR-510-YEL
EOF
)
if [ -f "$f" ] && [ "$(cat "$f")" = "$expected" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
