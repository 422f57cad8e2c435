#!/bin/bash
echo $$ > /app/server.pid
while true; do sleep 1; done
