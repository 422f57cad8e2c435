#!/bin/bash
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
out1=$(cd / && timeout 10 python3 /opt/tools/latency_report.py /opt/tools/samples.txt 2>/dev/null | tr -d '\r')
[ "$out1" = "mean latency: 215.9 ms over 8 samples" ] || exit 0
tmp=$(mktemp)
printf '# other host\n100\n250\n\n130\n' > "$tmp"
out2=$(cd / && timeout 10 python3 /opt/tools/latency_report.py "$tmp" 2>/dev/null | tr -d '\r')
rm -f "$tmp"
[ "$out2" = "mean latency: 160.0 ms over 3 samples" ] || exit 0
echo 1 > /logs/verifier/reward.txt
