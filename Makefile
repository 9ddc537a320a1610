# The two commands a new user runs (see README.md):
#   make compare   create .venv/ (pinned CPU torch first) and run the default comparison
#   make test      run the whole test suite (creates .venv/ first if needed); this is what CI runs: the tests that
#                  start no training processes on every core (pytest-xdist), then the distributed ones two at a time
#                  (a launch's start-up leaves a core idle about a third of the time), then, one at a time, those
#                  marked `alone`: they measure timing or contention, bind cores or check machine-wide state
# For development:
#   make test-fast the tests that start no training processes and are not slow (-m "not distributed and not slow"),
#                  on every core
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
# torch is installed first and pinned, so pip never resolves a multi-GB CUDA build on a CPU machine.
TORCH   ?= torch==2.13.0

.PHONY: setup compare test test-fast clean gpu-wheelhouse gpu-check

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile adapters/install/deepspeed.sh adapters/install/horovod.sh
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e '.[test,hf]'
	# Optional frameworks: each script leaves torch alone and, if it cannot install, says why and exits 0,
	# so its adapter is reported unavailable with that reason and everything else still works.
	bash adapters/install/deepspeed.sh $(BIN)/python
	bash adapters/install/horovod.sh $(BIN)/python
	$(BIN)/python -c "import torch; print('torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
	touch $@

compare: setup
	$(BIN)/compare run

# Every part runs even when one before it failed, and the target fails if any did. --dist loadfile keeps a test
# file's tests (and its module-scoped runs) on one worker; --no-loadscope-reorder hands the files out in the order
# tests/conftest.py puts them, the longest first.
test: setup
	rc=0; $(BIN)/python -m pytest -m "not distributed" -n auto || rc=$$?; \
	$(BIN)/python -m pytest -m "distributed and not alone" -n 2 --dist loadfile --no-loadscope-reorder \
	    || rc=$$?; \
	$(BIN)/python -m pytest -m "distributed and alone" || rc=$$?; exit $$rc

test-fast: setup
	$(BIN)/python -m pytest -m "not distributed and not slow" -n auto

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# A lent GPU machine (one CUDA GPU, its own PyTorch, no package registry): see README, "On a GPU".
#   make gpu-wheelhouse   here: .wheelhouse/ with the cp312 wheels it lacks, DeepSpeed, this project, apex's source
#   make gpu-check        there (with .wheelhouse carried): every CUDA path once, results/gpu_<gpu>_<time>/
GPU_PY ?= python3

gpu-wheelhouse: setup
	bash harness/gpu/wheelhouse $(BIN)/python

gpu-check:
	bash harness/gpu/check $(GPU_PY)

# A simulated multi-host cluster on this machine (network namespaces h1, h2 ...; needs root) for trying the
# frameworks' multi-node launchers: see harness/cluster/NOTES.md.
#   make cluster-deps [SLURM=1]   apt-get what it needs (SLURM=1: also slurmctld, slurmd, munge)
#   make simhosts [SLURM=1] [HOSTS=2]   bring it up;   make simhosts-down   remove every trace of it
HOSTS ?= 2
.PHONY: cluster-deps simhosts simhosts-down

cluster-deps:
	harness/cluster/install-deps $(if $(filter 1,$(SLURM)),--slurm)

simhosts:
	harness/cluster/simhosts up --hosts $(HOSTS) $(if $(filter 1,$(SLURM)),--slurm)

simhosts-down:
	harness/cluster/simhosts down
