#!/bin/bash
sed -i 's/[[:space:]]*$//' /home/user/projects/ledger-tools/sum_amounts.py
