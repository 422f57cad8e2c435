#!/bin/bash
mkdir -p /logs/verifier
ok=1
a=/home/user/backups/invoice-tool.tar.gz
[ -f "$a" ] || ok=0
gzip -t "$a" 2>/dev/null || ok=0
t=$(mktemp -d)
tar -xzf "$a" -C "$t" 2>/dev/null || ok=0
[ "$(ls -A "$t")" = "invoice-tool" ] || ok=0
check() { [ "$(sha256sum < "$t/invoice-tool/$1" 2>/dev/null | cut -d' ' -f1)" = "$2" ] || ok=0; }
check README.md ea5c2c438190dc884737b496e9a8f6973af544a1dce0bd881eccb72236d8fdbc
check invoicing/__init__.py d355c151eff75b24d12fd937dedcdd5225539d6cd9eb9618e2bed490801b9f2b
check invoicing/render.py 9883739113f879d481ff2d29ba794f78dfd1cdece3fd9afdca39d4409c6325ba
check requirements.txt 24d3af3f15aaa46bd0973c0490ea4232a6bff8d1fa2758b0c760badc150338ea
check templates/invoice.html 98ff6e03eab7f1d4e1038bb795b26ba8a1753607c18de544d77edbd2c854d704
check tests/test_render.py 9d41f147ac3dc38240c6f5a4039c0ec6f707c8314a8a8a10a8fbf956ef763dbb
# the original project must still be there
[ -f /home/user/projects/invoice-tool/invoicing/render.py ] || ok=0
rm -rf "$t"
echo $ok > /logs/verifier/reward.txt
