#!/bin/bash
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /home/user/notes 2>/dev/null || exit 0
g() { git -c safe.directory='*' "$@"; }
[ "$(g log -1 --format=%s main 2>/dev/null)" = "Add notes from 12 June planning meeting" ] || exit 0
[ "$(g log -1 --format=%s main~1 2>/dev/null)" = "Add notes from 29 May planning meeting" ] || exit 0
[ "$(g rev-list --count main 2>/dev/null)" = "3" ] || exit 0
g show main:meeting-2024-06-12.md 2>/dev/null | grep -q "Joost: ask ops for a second staging database" || exit 0
g cat-file -e main:scratch.txt 2>/dev/null && exit 0
g cat-file -e main:README.md 2>/dev/null || exit 0
g cat-file -e main:meeting-2024-05-29.md 2>/dev/null || exit 0
echo 1 > /logs/verifier/reward.txt
