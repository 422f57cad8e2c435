#!/bin/bash
mkdir -p /logs/verifier
ok=1
d=/opt/tools/bin
for f in deploy.sh backup-db.sh rotate-logs.sh healthcheck.sh; do
  m=$(stat -c %a "$d/$f" 2>/dev/null) || { ok=0; continue; }
  [ $(( 8#$m & 8#111 )) -eq $(( 8#111 )) ] || ok=0
done
for f in README.md tools.env crontab.example; do
  m=$(stat -c %a "$d/$f" 2>/dev/null) || { ok=0; continue; }
  [ $(( 8#$m & 8#111 )) -eq 0 ] || ok=0
done
echo $ok > /logs/verifier/reward.txt
