#!/bin/bash
cd /home/user/notes && git add meeting-2024-06-12.md && git commit -q -m 'Add notes from 12 June planning meeting'
