#!/bin/bash
paste -sd, /etc/ansible/inventories/prod_hosts.txt > /etc/ansible/inventories/prod_limit.txt
