#!/bin/bash
mkdir -p /logs/verifier
ok=1
[ -L /srv/www/current ] || ok=0
[ "$(readlink -f /srv/www/current)" = "/srv/www/releases/2024-05-14" ] || ok=0
grep -q 'build 2024-05-14' /srv/www/current/index.html 2>/dev/null || ok=0
# release folders unchanged: no stray links/files inside them
for r in 2024-04-30 2024-05-07 2024-05-14; do
  [ "$(cd /srv/www/releases/$r 2>/dev/null && find . | sort | tr '\n' ' ')" = ". ./index.html ./static ./static/site.css " ] || ok=0
done
[ "$(ls /srv/www/releases | tr '\n' ' ')" = "2024-04-30 2024-05-07 2024-05-14 " ] || ok=0
echo $ok > /logs/verifier/reward.txt
