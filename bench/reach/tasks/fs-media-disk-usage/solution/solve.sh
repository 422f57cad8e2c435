#!/bin/bash
cd /srv/media && du -s -- */ | sort -n | tail -1 | cut -f2 | tr -d / > /root/biggest_dir.txt
