# Two set-up commands: `make run` (install + the main job) and `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ENV_PKGS := $(patsubst %/pyproject.toml,-e %,$(wildcard environments/*/pyproject.toml))
# torch's CPU build lies on this machine's disk; pinning it keeps the installer from a CUDA build.
TORCH  ?= torch==2.13.0
# The venv gets uv (from PyPI) and uv installs the rest in one resolution (scripts/venv_install.py:
# pip's index and constraint settings become uv's flags; pip retries where uv fails). A fresh
# install here: 11-16 s for the venv and uv, 33-49 s for torch, rlvr and the environments (1 min
# for `make install` in all), against 11 s + 39 s + 72 s by pip (the venv and a pip upgrade,
# torch, the rest; empty caches, a loaded 2-core machine).
INSTALL = $(BIN)/python scripts/venv_install.py $(VENV)

# verifiers 0.3.1 (rlvr.envs.verifiers) without its dependencies, which pin mcp<2 against the mcp
# extra's mcp>=2 (and websockets<17 through openai-agents), plus the packages its classic API
# imports (and theirs that the other extras do not bring): about 88 MB, no torch. `pip check` lists the rest of its declared dependencies as missing.
VERIFIERS := verifiers==0.3.1 anthropic==2.17.0 renderers==0.1.12 prime-pydantic-config==0.4.3 tenacity==9.2.1 \
	aiolimiter==1.3.0 prime-sandboxes==0.5.1 connectrpc==0.11.1 pyqwest==0.12.0 protobuf-py==0.1.1 aiofiles==25.1.0 \
	msgpack==1.2.4 pyzmq==27.3.0 setproctitle==1.3.8 openai-agents==0.24.0 griffelib==2.4.1 docstring-parser==0.18.0

.PHONY: run test test-heavy install install-dev browser lint bench clean

# `make run` and `make test` started together share one venv: each step that writes it holds a
# lock (flock, where there is one), and the second to come finds the venv made.
LOCK   := $(if $(shell command -v flock),flock $(VENV).lock,)

$(BIN)/python:
	@echo 'make: creating $(VENV) with uv in it'
	$(LOCK) sh -c 'test -x $(BIN)/python || { $(PYTHON) -m venv $(VENV) && { $(BIN)/pip install -qq uv || echo "make: no uv; pip installs"; }; }'

# Each install runs again only when a pyproject.toml or this file changed (a stamp in the venv):
# the packages are editable, so a change of their code needs none (uv rebuilds every editable
# package each time it is asked: 8-19 s here).
PROJECTS := Makefile pyproject.toml $(wildcard environments/*/pyproject.toml)

install: $(VENV)/installed-run
install-dev: $(VENV)/installed-dev

$(VENV)/installed-run: $(PROJECTS) | $(BIN)/python
	@echo 'make: installing rlvr, CPU torch and the environments into $(VENV) (under a minute the first time)'
	$(LOCK) $(INSTALL) $(TORCH) -e '.[train,sandbox]' $(ENV_PKGS)
	touch $@

$(VENV)/installed-dev: $(PROJECTS) | $(BIN)/python
	@echo 'make: installing rlvr with every extra and the test tools into $(VENV) (under a minute the first time here)'
	$(LOCK) $(INSTALL) $(TORCH) -e '.[train,plot,gym,reasoninggym,textarena,mcp,sandbox,test]' $(ENV_PKGS)
	$(LOCK) $(INSTALL) --no-deps $(VERIFIERS)
	touch $@

# The main job: two oracle evaluations (that an environment's reference player scores what it
# should), then the shipped tic-tac-toe model (models/tictactoe-tiny, the env's default when no -m
# is given) greedy against every line of play on the CPU (532 games; a progress line at least
# every 30 s), then its table. One torch thread unless OMP_NUM_THREADS says otherwise: beside other
# busy processes more threads than free cores wait on each other.
RUN_THREADS ?= $(or $(OMP_NUM_THREADS),1)

run: install
	$(BIN)/rlvr eval reverse_text -m policy:oracle -n 10 -r 2 -q -o runs/make-run/reverse_text --resume
	$(BIN)/rlvr eval double_check -m policy:oracle -n 10 -r 2 -q -o runs/make-run/double_check --resume
	@echo 'make run: the shipped model against every line of play (532 games)'
	OMP_NUM_THREADS=$(RUN_THREADS) $(BIN)/rlvr eval tictactoe --exhaustive -t 48 -c 1024 -o runs/make-run/eval/shipped-exact --resume
	$(BIN)/python scripts/tictactoe_table.py runs/make-run --stages shipped

# The suite in TEST_WORKERS processes (pytest-xdist; 0 = one process), without the tests marked
# `heavy` (installs into fresh venvs, trainings of minutes): `make test-heavy` runs those, and CI
# (.ci/run) runs both. The HTTP fault tests allow 3 s a reply (tests/test_eval_http.py,
# TIMEOUT_S), so that 2 workers on a loaded 2-core machine keep their accounting.
TEST_WORKERS ?= 2

test: install-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not heavy"

test-heavy: install-dev
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m heavy

# Chromium for tests/test_report_browser.py (rlvr report pages in a real browser), from Debian:
# about 30 s and 414 MB as measured here. Without apt-get as root it says so, and the test is
# skipped with that reason; a failed install does not stop `make test` either.
browser:
	@if command -v chromium >/dev/null 2>&1; then echo "browser: $$(command -v chromium)"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
			|| echo "browser: chromium did not install; the report's browser test will be skipped"; \
	else echo "browser: no chromium and no apt-get as root; the report's browser test will be skipped"; fi

lint:
	$(BIN)/ruff check src tests environments benchmarks scripts experiments
	$(BIN)/ruff format --check src tests environments benchmarks scripts experiments
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(VENV).lock runs build *.egg-info src/*.egg-info
