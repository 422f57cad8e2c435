#!/bin/bash
wc -l /app/sorted.txt
