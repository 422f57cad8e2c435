#!/bin/bash
find /data/uploads -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2- > /root/largest.txt
