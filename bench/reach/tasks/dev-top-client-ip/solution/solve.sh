#!/bin/bash
awk '{print $1}' /var/log/nginx/access.log | sort | uniq -c | sort -rn | head -n1 | awk '{print $2}' > /root/top_client.txt
