#!/bin/bash
mkdir -p /home/user/for-accountant && find /home/user/Documents -type f -name '*.pdf' -exec cp -t /home/user/for-accountant {} +
