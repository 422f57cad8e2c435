#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/srv/docs/uploader/CHANGES.newest-first.txt
expected=$(cat <<'EOF'
2024-04-22  v2.0.1  migration script for old config files
2024-02-07  v2.0.0  drop Python 3.7 support, new config format
2023-12-19  v1.3.1  update bundled CA certificates
2023-10-03  v1.3.0  new 'status' subcommand
2023-08-11  v1.2.1  retry on HTTP 429 with backoff
2023-06-28  v1.2.0  parallel uploads (up to 8 at once)
2023-05-02  v1.1.1  handle spaces in paths on Windows
2023-03-15  v1.1.0  add --dry-run flag
2023-02-20  v1.0.1  fix crash when config file is empty
2023-01-09  v1.0.0  first public release
EOF
)
if [ -f "$f" ] && [ "$(cat "$f")" = "$expected" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
