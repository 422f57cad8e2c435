#!/usr/bin/env bash
# Build the CPU stage image with podman: localhost/termrl/stage-cpu:TAG (default latest).
#
#   images/stage-cpu/build.sh [TAG]
#
# Needs the local base image termrl/base:bookworm (scripts/setup.sh builds it) and the
# torch CPU wheel (TORCH_WHEEL, default /opt/wheels/torch-2.13.0+cpu-*.whl). Dependencies
# come from the package index over HTTPS; the host's CA bundle is bind-mounted read-only
# for the RUN steps, so it is used but never stored in a layer.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tag=${1:-latest}
wheel=${TORCH_WHEEL:-$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n1)}
[ -f "$wheel" ] || { echo "no torch wheel (set TORCH_WHEEL)" >&2; exit 1; }
ca=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/wheels" "$context/src"
cp "$root/images/stage-cpu/Dockerfile" "$context/"
cp "$wheel" "$context/wheels/"
tar -C "$root" --exclude=__pycache__ -cf - pyproject.toml README.md termrl components pipelines \
  | tar -C "$context/src" -xf -

exec podman build --network=host -v "$ca:/etc/ssl/certs/ca-certificates.crt:ro" \
  -t "localhost/termrl/stage-cpu:$tag" "$context"
