#!/bin/bash
find /var/log/billing -type f -name '*.log' -mtime +30 -delete
