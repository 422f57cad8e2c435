#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/home/user/newsletter/unique.txt
expected=$(cat <<'EOF'
anna.k@mailbox.example
ben.adams@example.com
chen.li@example.org
jdoe@example.net
lucas.f@example.net
maria.lopez@example.org
oliver.w@example.co.uk
priya.n@example.com
tom.becker@example.com
zoe.martin@example.com
EOF
)
got=$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' "$f" 2>/dev/null | grep -v '^$')
orig=$(md5sum /home/user/newsletter/signups.txt | cut -d' ' -f1)
if [ -f "$f" ] && [ "$got" = "$expected" ] && [ "$orig" = "cd5794d7e31e4c94eaa0fd053d9179b1" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
