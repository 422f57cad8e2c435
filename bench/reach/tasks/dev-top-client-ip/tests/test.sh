#!/bin/bash
mkdir -p /logs/verifier
got=$(tr -d ' \t\r\n' < /root/top_client.txt 2>/dev/null)
if [ "$got" = "203.0.113.17" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
