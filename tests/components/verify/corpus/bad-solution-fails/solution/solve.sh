#!/bin/bash
# Planted defect: counts the header too.
wc -l < /app/data.csv > /app/rows.txt
