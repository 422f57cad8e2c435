#!/usr/bin/env bash
# Build the CPU stage image with podman: localhost/termrl/stage-cpu:TAG and :latest.
#
#   images/stage-cpu/build.sh [TAG]     (default TAG: the code version, as `termrl compile` uses)
#
# The same as `termrl images build --stage stage-cpu --no-base`: wheels are fetched on the
# host (pip's own configuration: local indexes, the torch CPU wheel), the build runs offline.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
cd "$root"
exec "$py" -m pipelines.cli images build --stage stage-cpu --no-base ${1:+--tag "$1"}
