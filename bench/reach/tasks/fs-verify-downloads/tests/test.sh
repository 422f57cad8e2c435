#!/bin/bash
mkdir -p /logs/verifier
got=$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' /root/corrupted.txt 2>/dev/null | grep -v '^$' | sort | tr '\n' ' ')
exp="debian-12.5.0-arm64-netinst.iso debian-live-12.5.0-amd64-gnome.iso "
if [ -f /root/corrupted.txt ] && [ "$got" = "$exp" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
