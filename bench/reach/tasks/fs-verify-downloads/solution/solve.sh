#!/bin/bash
cd /data/mirror/images && sha256sum -c SHA256SUMS 2>/dev/null | grep ': FAILED' | cut -d: -f1 > /root/corrupted.txt
