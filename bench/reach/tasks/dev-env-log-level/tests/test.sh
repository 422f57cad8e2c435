#!/bin/bash
mkdir -p /logs/verifier
if python3 - <<'PY'
import sys, re
try:
    lines = [l.rstrip() for l in open("/home/user/webapp/.env").read().splitlines()]
except Exception:
    sys.exit(1)
lines = [l for l in lines if l.strip()]
expected_other = [
    "# staging settings for the webapp -- do not commit secrets here",
    "APP_NAME=orchard-webapp",
    "APP_ENV=staging",
    "APP_PORT=8080",
    "DATABASE_URL=postgres://webapp@db-staging.internal:5432/orchard",
    "REDIS_URL=redis://cache-staging.internal:6379/2",
    "# LOG_LEVEL=info   (production default)",
    "LOG_FORMAT=json",
    "SESSION_TTL_MINUTES=120",
    "FEATURE_NEW_CHECKOUT=true",
    "SENTRY_DSN=",
]
level = [l for l in lines if re.match(r"\s*(export\s+)?LOG_LEVEL\s*=", l)]
other = [l for l in lines if l not in level]
if len(level) != 1 or other != expected_other:
    sys.exit(1)
value = level[0].split("=", 1)[1].strip().strip("'\"")
sys.exit(0 if value == "warning" else 1)
PY
then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
