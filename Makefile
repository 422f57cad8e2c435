# The two commands of the README. Each does its own set-up (idempotent).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup run test test-all lint
setup:
	bash scripts/setup.sh

run: setup
	$(VENV)/bin/termrl run

test: setup
	$(PY) -m pytest -m "not slow or ci" -q

test-all: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
