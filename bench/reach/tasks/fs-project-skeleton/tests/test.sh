#!/bin/bash
mkdir -p /logs/verifier
ok=1
b=/home/user/projects/weather-station
for d in src/collector src/dashboard tests docs data/raw data/processed; do
  [ -d "$b/$d" ] && [ ! -L "$b/$d" ] || ok=0
done
[ -f /home/user/projects/old-scraper/src/main.py ] || ok=0
echo $ok > /logs/verifier/reward.txt
