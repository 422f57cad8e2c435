#!/bin/bash
grep -vxFf /srv/ops/monitored.txt /srv/ops/inventory.txt > /srv/ops/unmonitored.txt
