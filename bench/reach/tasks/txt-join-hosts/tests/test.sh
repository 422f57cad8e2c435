#!/bin/bash
mkdir -p /logs/verifier
ok=0
f=/etc/ansible/inventories/prod_limit.txt
if [ -f "$f" ] && [ "$(tr -d '\n' < "$f")" = "web01.prod.example.net,web02.prod.example.net,web03.prod.example.net,api01.prod.example.net,api02.prod.example.net,worker01.prod.example.net,worker02.prod.example.net,db01.prod.example.net" ]; then ok=1; fi
if [ "$ok" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
