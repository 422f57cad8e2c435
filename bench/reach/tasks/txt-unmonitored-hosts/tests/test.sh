#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/srv/ops/unmonitored.txt
expected=$(cat <<'EOF'
app-ams-02
app-fra-02
cache-ams-01
mail-fra-01
EOF
)
got=$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' "$f" 2>/dev/null | grep -v '^$' | LC_ALL=C sort)
exp=$(printf '%s\n' "$expected" | LC_ALL=C sort)
if [ -f "$f" ] && [ "$got" = "$exp" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
