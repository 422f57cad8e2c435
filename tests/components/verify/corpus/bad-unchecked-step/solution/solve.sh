#!/bin/bash
sort -u /app/names.txt > /app/sorted.txt
chmod +x /app/report.sh
