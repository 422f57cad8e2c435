#!/usr/bin/env bash
# One markdown table of GPU-path checks (vLLM engine, train steps, DeepSpeed ZeRO-2);
# the logic is scripts/gpu_check.py. `--cpu` runs the CPU variant; --help lists the options.
# The python: $PYTHON, else the repository's .venv, else python3 on PATH.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" "$REPO/scripts/gpu_check.py" "$@"
