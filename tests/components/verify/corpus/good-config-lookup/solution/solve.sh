#!/bin/bash
set -euo pipefail
value() {  # value SECTION KEY: the key's value in that section of settings.ini
  awk -F' *= *' -v s="[$1]" -v k="$2" '/^\[/{in_s = ($0 == s)} in_s && $1 == k {print $2}' /app/settings.ini
}
printf 'PORT=%s\nDB_HOST=%s\n' "$(value server port)" "$(value database host)" > /app/deploy.env
