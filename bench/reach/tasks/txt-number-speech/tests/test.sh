#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/home/user/drafts/speech-numbered.txt
expected=$(cat <<'EOF'
1: Good evening, everyone, and thank you for coming.
2: Ten years ago this shop was a single bench in a garage.
3: Today we ship to customers in fourteen countries.
4: None of that happened by accident.
5: It happened because of the people in this room.
6: To our first customers: thank you for taking a chance on us.
7: To our suppliers: thank you for your patience with our late orders.
8: And to the team: thank you for every late night and early morning.
9: Here's to the next ten years.
EOF
)
got=$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' "$f" 2>/dev/null)
if [ -f "$f" ] && [ "$got" = "$expected" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
