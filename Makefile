# Two set-up commands: `make run` (install + the main job) and `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ENV_PKGS := $(patsubst %/pyproject.toml,-e %,$(wildcard environments/*/pyproject.toml))
# torch's CPU build lies on this machine's disk; pinning it first keeps pip from fetching a CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: run test install install-dev lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[train,sandbox]' $(ENV_PKGS)

install-dev: $(BIN)/python
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[train,plot,gym,mcp,sandbox,test]' $(ENV_PKGS)

# The main job: the shipped tic-tac-toe model (models/tictactoe-tiny, the env's default when no -m
# is given) plays 200 greedy games against each opponent on the CPU, then the table.
run: install
	$(BIN)/rlvr eval reverse_text -m policy:oracle -n 10 -r 2 -q -o runs/make-run/reverse_text --resume
	$(BIN)/rlvr eval double_check -m policy:oracle -n 10 -r 2 -q -o runs/make-run/double_check --resume
	$(BIN)/rlvr eval tictactoe -a '{"opponent": "random", "eval_tasks": 200}' -n -1 -r 1 -T 0 -c 200 -q -o runs/make-run/eval/shipped-random --resume
	$(BIN)/rlvr eval tictactoe -a '{"opponent": "optimal", "eval_tasks": 200}' -n -1 -r 1 -T 0 -c 200 -q -o runs/make-run/eval/shipped-optimal --resume
	$(BIN)/python scripts/tictactoe_table.py runs/make-run --stages shipped --opponents random,optimal

test: install-dev
	$(BIN)/python -m pytest

lint:
	$(BIN)/ruff check src tests environments benchmarks scripts
	$(BIN)/ruff format --check src tests environments benchmarks scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs build *.egg-info src/*.egg-info
