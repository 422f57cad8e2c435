#!/bin/bash
grep -c ' ERROR ' /var/log/partner-sync/worker.log > /home/user/error_count.txt
