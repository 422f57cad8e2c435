#!/bin/bash
mkdir -p /logs/verifier
ok=1
cd /var/log/billing || ok=0
for f in invoice-run-2024-01-03.log invoice-run-2024-01-10.log workers/queue-2024-01-05.log api/access-2023-12-28.log; do
  [ -e "$f" ] && ok=0
done
for f in README invoice-run-2023-11.log.gz invoice-run-current.log workers/queue-current.log api/access.log; do
  [ -f "$f" ] || ok=0
done
echo $ok > /logs/verifier/reward.txt
