#!/bin/bash
mkdir -p /logs/verifier
got=$(tr -d '\n' < /root/biggest_dir.txt 2>/dev/null | sed 's/^[[:space:]]*//;s/[[:space:]]*$//;s#/$##')
if [ "$got" = "photos" ] || [ "$got" = "/srv/media/photos" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
