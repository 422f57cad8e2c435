#!/bin/bash
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
rc=/home/user/.bashrc
[ -f "$rc" ] || exit 0
grep -q 'GRADLE_USER_HOME' "$rc" || exit 0
# the rest of the file is still there
grep -qx "alias gs='git status'" "$rc" || exit 0
grep -qx 'export EDITOR=vim' "$rc" || exit 0
grep -q 'If not running interactively' "$rc" || exit 0
# a fresh interactive shell exports it to child processes
got=$(cd / && env -i HOME=/home/user PATH=/usr/local/bin:/usr/bin:/bin TERM=dumb timeout 10 bash -i -c 'python3 -c "import os; print(os.environ.get(\"GRADLE_USER_HOME\", \"\"))"' 2>/dev/null < /dev/null | tail -n1)
[ "$(printf %s "$got" | sed 's:/*$::')" = "/data/gradle-cache" ] || exit 0
echo 1 > /logs/verifier/reward.txt
