# The two commands of the README. Both set up .venv themselves (scripts/bootstrap.sh, idempotent).
#   make quick   the main job end to end on the quick profile (minutes on a CPU)
#   make test    the whole test suite, its files spread over the cores (pytest-xdist: -n auto, one worker per core)
#   make bench   every benchmark (make bench SMOKE=1: the seconds-long smoke run of CI)
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
CORES ?= 2

.PHONY: quick test setup bench
quick: setup
	snakemake --cores $(CORES) --configfile config/quick.yaml -- quick/results/darcy_ono.json
	opflow show quick/results/darcy_ono.json

test: setup
	python -m pytest -q -n auto --dist loadfile

setup:
	@scripts/bootstrap.sh

# every benchmarks/*.py -> benchmarks/results/*.json + SUMMARY.md (opflow/bench.py); SMOKE=1: tiny sizes (CI)
bench: setup
	opflow bench $(if $(SMOKE),--smoke)
