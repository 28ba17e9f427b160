# minbert_nb: `make train` runs the main job, `make test` runs the whole suite.
# Each target creates .venv and installs what it needs on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install -q --disable-pip-version-check --no-compile
# Bytecode: the environment may set PYTHONDONTWRITEBYTECODE=1, and then every process compiles again each module it imports
# (torch alone: seconds a process, and the suite starts hundreds). pip is told not to compile (`--no-compile`: that is all
# it installs, on one core), and the commands below may write bytecode: each module is compiled once, by the first process
# that imports it, and only the modules something imports (a compileall of the whole environment cost 42 s of CI's install).
unexport PYTHONDONTWRITEBYTECODE
# torch: the CPU build, on any pip setup. PyPI's Linux torch is the CUDA build (GBs), so torch comes from the PyTorch
# CPU index (or a wheel already on this machine, for offline installs), and every later pip call pins the same version.
# GPU users pick their CUDA index, e.g.  make TORCH_INDEX=https://download.pytorch.org/whl/cu126 train
TORCH_VERSION ?= 2.13.0
TORCH         ?= torch==$(TORCH_VERSION)
CPU_INDEX     := https://download.pytorch.org/whl/cpu
TORCH_INDEX   ?= $(CPU_INDEX)
export MPLBACKEND ?= Agg
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install dev demo train test test-nodata nbs docs readme clean gpu-check gpu-pack

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The local wheel is tried twice (one CI install once failed there for a reason its hidden output did not keep); before
# falling back to the index, the reason is printed (the whole of it stays in .venv/torch-local.log).
$(VENV)/.torch: | $(BIN)/python
	@log=$(VENV)/torch-local.log; rm -f $$log; \
	if [ "$(TORCH_INDEX)" = "$(CPU_INDEX)" ] && { $(PIP) --no-deps --no-index "$(TORCH)" 2>>$$log || $(PIP) --no-deps --no-index "$(TORCH)" 2>>$$log; }; then \
	  echo "torch: using the wheel already on this machine"; \
	else if [ -s $$log ]; then echo "torch: the local install failed ($$log): $$(grep -v '^ *$$' $$log | tail -n 2 | tr '\n' ' ')"; fi; \
	  echo "torch: $(TORCH) from $(TORCH_INDEX)"; $(PIP) "$(TORCH)" --index-url "$(TORCH_INDEX)"; fi
	touch $@

# The rest is installed by uv, itself installed from the package index into the venv: the ~130 packages of the dev extras
# take about 10 s where pip takes 80 s on 2 cores (the same versions: `pip freeze` is identical). torch is already in place
# and pinned, so uv keeps it. uv does not read pip's configuration (a private index, find-links): where uv cannot be
# installed or its install fails, pip installs the same (the reason is in .venv/uv.log). UV=0 always uses pip.
UV ?= 1
define INSTALL
	@log=$(VENV)/uv.log; rm -f $$log; \
	if [ "$(UV)" = "1" ] && $(PIP) uv >>$$log 2>&1 && $(BIN)/uv pip install -q --python $(BIN)/python $(1) >>$$log 2>&1; then \
	  echo "installed with uv: $(1)"; \
	else [ "$(UV)" = "1" ] && echo "uv could not install ($$log: $$(grep -v '^ *$$' $$log | tail -n 1)): installing with pip"; \
	  $(PIP) $(1); fi
endef

$(VENV)/.runtime: pyproject.toml $(VENV)/.torch
	$(call INSTALL,"$(TORCH)" -e .)
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.torch
	$(call INSTALL,"$(TORCH)" -e ".[dev]")
	touch $(VENV)/.runtime $@

install: $(VENV)/.runtime
dev: $(VENV)/.dev

# The main job: the `quick` preset on the embedded backbone (CPU, minutes on 2 cores). ARGS adds flags, e.g.
# make train ARGS="--backbone bert-base-uncased --device cuda"   (reaches the Hugging Face hub when online)
train: $(VENV)/.runtime
	$(BIN)/minbert_train --preset quick $(ARGS)

demo: $(VENV)/.runtime
	$(BIN)/minbert_demo

# The whole suite (pytest + nbval over nbs/), offline; the full data is used when present, else tests/sample_data.
# Test files and notebooks run side by side, one process per core (pytest-xdist; a file's tests stay in one process), each
# on one thread, so the processes share the cores instead of each asking for all of them. MINBERT_FSYNC=0: checkpoints are
# written atomically but not fsynced (08a_checkpoint; about a second per MiniLM run here, where no power cut is tested).
WORKERS ?= 4
PYTEST  = MINBERT_FSYNC=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest tests nbs --nbval-lax \
          --nbval-current-env -p no:cacheprovider -q -n auto --maxprocesses=$(WORKERS) --dist loadfile --durations=10
# The first pass records which test files and notebooks read the full data (.data-trace/, see conftest.py) for the second.
test: $(VENV)/.dev
	MINBERT_DATA_TRACE=1 PYTHONPATH=$(CURDIR)/tests/trace$${PYTHONPATH:+:$$PYTHONPATH} $(PYTEST)

# The suite with the data lookup pointed at an empty folder, as on a machine without the data (CI runs both passes).
# What the first pass ran without reading the full data gives the same result here and is left out (tests/conftest.py).
test-nodata: $(VENV)/.dev
	d=$$(mktemp -d) && MINBERT_NODATA_PASS=1 MINBERT_DATA=$$d $(PYTEST); rc=$$?; rm -rf $$d; exit $$rc

# Every CUDA path once (minbert_gpu_check: quick in bf16, eval, predict, the Predictor, resume, each PEFT module, SMART, PCGrad,
# compile, a one-process NCCL torchrun, the fused AdamW, the benchmark with MFU): one report, gpu-check.json, and a
# non-zero exit status if a path fails. Minutes on one GPU; elsewhere the same paths on a tiny budget. ARGS adds flags.
gpu-check: $(VENV)/.runtime
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/minbert_gpu_check --json gpu-check.json $(ARGS)

# For a GPU machine without network: the embedded backbone (fp16, xz), the data and the wheels it lacks, into gpu-pack/
# (ignored; about 40 MiB, refused if it and the tracked tree exceed the 64 MiB a call carries). There,
# `python3 tools/pack_gpu.py run` unpacks them and runs the GPU check; the report comes back in $OUT/gpu-check.json.
# Order-only: a newer pyproject.toml does not reinstall the environment first.
gpu-pack: | $(VENV)/.runtime
	$(BIN)/python tools/pack_gpu.py pack

# Re-run every notebook in place (or those NB names, e.g. `make nbs NB=nbs/reproduction.ipynb`), skipping `#| notest` /
# `#| gpu` cells (stores outputs for the docs); export; clean. The notebooks' demos train into `tempfile.mkdtemp()`
# folders (hundreds of MB each): they go to a TMPDIR of this run's own, removed after it, as under `make test`. They train in
# fp32 on every CPU (MINBERT_CPU_BF16=0), as under test (conftest.py): the stored outputs are the same on any CPU. That TMPDIR
# is named after the notebooks (e.g. /tmp/minbert-nbs-16b_ablate) and tools/nbs_site seeds the scratch folders' names, so
# the paths a stored output prints are the same at every re-run; it must not exist yet (a run of the same notebooks now, or
# one that was killed: remove it then).
NB ?=
nbs: $(VENV)/.dev
	name=$$(for n in $(NB); do basename $$n .ipynb; done | paste -sd+ -); tmp=$${TMPDIR:-/tmp}/minbert-nbs-$${name:-all}; \
	mkdir "$$tmp" || { echo "$$tmp exists: another 'make nbs' of these notebooks is running, or one was stopped; remove that folder if none runs" >&2; exit 1; }; \
	HF_HUB_OFFLINE=1 MINBERT_CPU_BF16=0 TMPDIR=$$tmp PYTHONPATH=$(CURDIR)/tools/nbs_site$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/nbdev-test --n-workers 1 --save $(NB); \
	  rc=$$?; rm -rf "$$tmp"; exit $$rc
	$(BIN)/nbdev-export && $(BIN)/nbdev-clean

# The offline docs site in _site/ (no Quarto, nothing from the web): the notebooks in reading order, MathJax bundled from the
# dev extras; open _site/index.html or serve it, e.g. .venv/bin/python -m http.server -d _site. Its sidebar sections come from nbs/sidebar.yml.
docs: $(VENV)/.dev
	$(BIN)/python tools/docs.py site

readme: $(VENV)/.dev
	$(BIN)/python tools/docs.py readme

clean:
	rm -rf _proc _site _site_screens build *.egg-info
