#!/bin/bash
date -d '2024-03-18 +397 days' +%F > /home/user/certs/expiry.txt
