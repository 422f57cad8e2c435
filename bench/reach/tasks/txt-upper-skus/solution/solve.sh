#!/bin/bash
tr '[:lower:]' '[:upper:]' < /data/warehouse/skus.txt > /data/warehouse/skus_upper.txt
