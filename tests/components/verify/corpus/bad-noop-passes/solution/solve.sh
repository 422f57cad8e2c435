#!/bin/bash
gzip -k /app/data.txt
