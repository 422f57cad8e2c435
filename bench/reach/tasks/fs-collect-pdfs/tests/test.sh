#!/bin/bash
mkdir -p /logs/verifier
ok=1
out=/home/user/for-accountant
src=/home/user/Documents
[ -d "$out" ] || ok=0
[ -z "$(find "$out" -mindepth 1 -type d 2>/dev/null)" ] || ok=0
[ "$(find "$out" -type f 2>/dev/null | wc -l)" -eq 7 ] || ok=0
for f in bank/2023/statement-2023-11.pdf bank/2023/statement-2023-12.pdf bank/2024/statement-2024-01.pdf insurance/car-policy-2024.pdf work/expenses/q1/receipt-train-berlin.pdf "work/expenses/q1/hotel invoice.pdf" donation-receipt-unicef.pdf; do
  b=$(basename "$f")
  [ -f "$src/$f" ] || ok=0
  grep -qF "% $b" "$out/$b" 2>/dev/null || ok=0
  head -c 8 "$out/$b" 2>/dev/null | grep -q '^%PDF-1.4' || ok=0
done
echo $ok > /logs/verifier/reward.txt
