#!/bin/bash
cd /home/user/photos && for f in *.JPEG; do mv -- "$f" "${f%.JPEG}.jpg"; done
