#!/bin/bash
sqlite3 /data/shop.db "SELECT email FROM customers WHERE country='DE' ORDER BY email;" > /data/de_customers.txt
