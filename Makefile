# The two commands of the README. Both set up .venv themselves (scripts/bootstrap.sh, idempotent).
#   make quick   the main job end to end on the quick profile (minutes on a CPU)
#   make test    the whole test suite
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
CORES ?= 2

.PHONY: quick test setup bench
quick: setup
	snakemake --cores $(CORES) --configfile config/quick.yaml -- quick/results/darcy_ono.json
	opflow show quick/results/darcy_ono.json

test: setup
	python -m pytest -q

setup:
	@scripts/bootstrap.sh

bench: setup
	python -m benchmarks.darcy_fd
	python -m benchmarks.convergence
