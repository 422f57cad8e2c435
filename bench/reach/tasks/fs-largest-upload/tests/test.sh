#!/bin/bash
mkdir -p /logs/verifier
got=$(tr -d '\n' < /root/largest.txt 2>/dev/null | sed 's/^[[:space:]]*//;s/[[:space:]]*$//')
if [ "$got" = "/data/uploads/carol/scans/contract-signed.tiff" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
