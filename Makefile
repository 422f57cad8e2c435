# The two commands of the README. Each does its own set-up (idempotent).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup base-images run test test-all lint image-cpu
setup:
	bash scripts/setup.sh

# Local Debian base images for sandboxes (mmdebstrap, ~1-5 min once; seconds when current).
base-images: setup
	$(VENV)/bin/termrl sandbox build-base

run: base-images
	$(VENV)/bin/termrl run

# The slowest tests are listed at the end: the default run should stay well under 30 minutes.
test: base-images
	$(PY) -m pytest -m "not slow or ci" -q --durations=25

# Everything, slow end-to-end tests included; DeepSpeed (CPU, gloo) for its ZeRO tests.
test-all: base-images
	DS_BUILD_OPS=0 $(VENV)/bin/pip install -q -e '.[deepspeed]'
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The CPU stage image (podman; torch from the local wheel). Not needed by run/test.
image-cpu: base-images
	images/stage-cpu/build.sh
