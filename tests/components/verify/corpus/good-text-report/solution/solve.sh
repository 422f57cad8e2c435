#!/bin/bash
set -euo pipefail
# the output folder first: the redirections below need it
mkdir -p /app/out
upper() {
  tr '[:lower:]' '[:upper:]'
}
upper < /app/input.txt > /app/out/upper.txt
for f in /app/input.txt; do
  wc -l < "$f" | tr -d ' ' > /app/out/lines.txt
done
