#!/bin/bash
awk -F, 'NR>1{s+=$4} END{printf "%.2f\n", s}' /srv/reports/invoices_2024_q3.csv > /srv/reports/q3_total.txt
