#!/bin/bash
chmod +x /app/server.sh
nohup /app/server.sh > /dev/null 2>&1 &
sleep 0.5
