#!/bin/bash
cut -d: -f1 /opt/audit/ledger01/passwd > /opt/audit/ledger01/accounts.txt
