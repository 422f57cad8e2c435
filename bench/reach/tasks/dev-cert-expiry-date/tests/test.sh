#!/bin/bash
mkdir -p /logs/verifier
got=$(tr -d ' \t\r\n' < /home/user/certs/expiry.txt 2>/dev/null)
if [ "$got" = "2025-04-19" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
