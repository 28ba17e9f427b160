# minbert_nb: `make demo` / `make train` run the main job, `make test` runs the whole suite.
# Each target creates .venv and installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel, pinned in the same pip call so that pip never pulls CUDA builds. GPU users: see README.
TORCH  ?= torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export MPLBACKEND ?= Agg
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install dev demo train test nbs docs readme clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check "$(TORCH)" -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check "$(TORCH)" -e ".[dev]"
	touch $(VENV)/.runtime $@

install: $(VENV)/.runtime
dev: $(VENV)/.dev

demo: $(VENV)/.runtime
	$(BIN)/minbert_demo

# The main job: the `quick` preset (embedded backbone, CPU, about 5 minutes on 2 cores). ARGS adds flags.
train: $(VENV)/.runtime
	$(BIN)/minbert_train --preset quick $(ARGS)

test: $(VENV)/.dev
	$(BIN)/python -m pytest tests nbs --nbval-lax --nbval-current-env -p no:cacheprovider -q

# Re-run every notebook in place, skipping `#| notest` / `#| gpu` cells (stores outputs for the docs); export; clean.
nbs: $(VENV)/.dev
	$(BIN)/nbdev-test --n-workers 1 --save
	$(BIN)/nbdev-export && $(BIN)/nbdev-clean

docs: $(VENV)/.dev
	$(BIN)/python tools/docs.py site

readme: $(VENV)/.dev
	$(BIN)/python tools/docs.py readme

clean:
	rm -rf _proc _site build *.egg-info
