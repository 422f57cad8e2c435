#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/srv/billing/config/settings.ini
expected=$(cat <<'EOF'
[server]
bind = 0.0.0.0
port = 8080
workers = 4

[database]
host = db-primary.corp.internal
port = 5432
name = billing
user = billing_app

[replica]
host = db-primary.corp.internal
port = 5433
readonly = true

[cache]
host = redis01.corp.internal
port = 6379

[reports]
# exports still go through the old box until Q3
export_dsn = postgres://report@db-primary.corp.internal:5432/billing
EOF
)
if [ -f "$f" ] && [ "$(cat "$f")" = "$expected" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
