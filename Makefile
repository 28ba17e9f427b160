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

.PHONY: install dev demo test nbs docs readme clean

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

test: $(VENV)/.dev
	$(BIN)/python -m pytest tests nbs --nbval-lax --nbval-current-env -p no:cacheprovider -q

# Re-run every notebook in place (stores outputs for the docs), then export and clean.
nbs: $(VENV)/.dev
	cd nbs && for nb in [0-9]*.ipynb index.ipynb; do ../$(BIN)/jupyter nbconvert --to notebook --execute --inplace $$nb || exit 1; done
	$(BIN)/nbdev-export && $(BIN)/nbdev-clean

docs: $(VENV)/.dev
	$(BIN)/python tools/docs.py site

readme: $(VENV)/.dev
	$(BIN)/python tools/docs.py readme

clean:
	rm -rf _proc _site build *.egg-info
