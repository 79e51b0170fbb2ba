# The README's quickstart: `make demo` and `make test`. Both create .venv on first use,
# so a fresh machine with Python 3.11+ needs nothing installed by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/loomctx demo

lint: $(STAMP)
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/ruff check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

# Tests run in one worker process per core (pytest-xdist; each test has its own temporary
# folder, store and ports), and coverage is combined across them. `make test` (what CI runs)
# includes the tests marked `slow` (soak, crash, the demo with the real embedder) and runs
# every property test with >= 500 examples (the ci hypothesis profile); `make test-fast`
# leaves the slow tests out and runs 100 examples (dev), for a quick check while working.
PYTEST := $(BIN)/pytest -n auto --dist worksteal
COVER  := --cov --cov-branch --cov-report=term --cov-fail-under=90

test: lint typecheck
	HYPOTHESIS_PROFILE=ci $(PYTEST) $(COVER)

test-fast: lint typecheck
	HYPOTHESIS_PROFILE=dev $(PYTEST) -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/tokens_bench.py
	$(BIN)/python bench/assembler_bench.py
	$(BIN)/python bench/orchestrator_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage .hypothesis
