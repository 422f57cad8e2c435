#!/bin/bash
mkdir -p /logs/verifier
got=$(tr -d ' \t\r\n"' < /opt/deploy/billing-api/current_commit.txt 2>/dev/null)
if [ "$got" = "9f3c2ab71e0d4c58b6a1f2e93d7c04a1b8e6f512" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
