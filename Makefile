# The two commands of the README. Each does its own set-up (idempotent).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup base-images run test test-all lint
setup:
	bash scripts/setup.sh

# Local Debian base images for sandboxes (mmdebstrap, ~1-5 min once; seconds when current).
base-images: setup
	$(VENV)/bin/termrl sandbox build-base

run: base-images
	$(VENV)/bin/termrl run

test: base-images
	$(PY) -m pytest -m "not slow or ci" -q

test-all: base-images
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
