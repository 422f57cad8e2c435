#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/opt/audit/ledger01/accounts.txt
expected=$(cat <<'EOF'
root
daemon
bin
sys
www-data
backup
nobody
postgres
hkowalski
rpatel
deploy
mgarcia
svc-backup
EOF
)
got=$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' "$f" 2>/dev/null | grep -v '^$')
if [ -f "$f" ] && [ "$got" = "$expected" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
