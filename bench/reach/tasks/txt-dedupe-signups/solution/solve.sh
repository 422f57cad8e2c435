#!/bin/bash
sort -u /home/user/newsletter/signups.txt > /home/user/newsletter/unique.txt
