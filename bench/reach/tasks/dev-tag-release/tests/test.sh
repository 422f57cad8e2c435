#!/bin/bash
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app/inventory-service 2>/dev/null || exit 0
g() { git -c safe.directory='*' "$@"; }
# the tag (lightweight or annotated) must point at the "Bump version to 2.3.0" commit
[ "$(g rev-parse -q --verify 'refs/tags/v2.3.0^{commit}' 2>/dev/null)" = "48ad6910c9e4bc67f87ba57af76c8b62d9da3a62" ] || exit 0
# main untouched, old tag untouched
[ "$(g rev-parse -q --verify refs/heads/main 2>/dev/null)" = "a6775f38a89d9c5150f52b7260a2a83c13933478" ] || exit 0
[ "$(g rev-parse -q --verify 'refs/tags/v2.2.0^{commit}' 2>/dev/null)" = "387944188bc42ec50e2cb9d597a432eb015590c9" ] || exit 0
echo 1 > /logs/verifier/reward.txt
