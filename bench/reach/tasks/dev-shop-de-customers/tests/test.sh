#!/bin/bash
mkdir -p /logs/verifier
expected='anna.schmidt@gmx.de
felix.brandt@mailbox.org
j.becker@web.de
katrin.mueller@t-online.de
lena.hoffmann@posteo.de
markus@vogel-design.de'
got=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' /data/de_customers.txt 2>/dev/null | tr -d '\r' | grep -v '^$')
if [ -f /data/de_customers.txt ] && [ "$got" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
