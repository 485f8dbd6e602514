# Two entry points for a fresh machine (Python 3.11): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-slow venv lint docs clean

$(BIN)/mbsd-twin: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	$(BIN)/python -c "from mbsd_twin.warmup import warm; print(f'compiled kernels cached in {warm():.0f} s')"
	$(BIN)/python -c "from mbsd_twin.fmi.standalone.engine_object import warm; print(f'standalone FMU engine compiled in {warm():.0f} s')"
	touch $@

venv: $(BIN)/mbsd-twin

DEMO_SECONDS ?= 20
DEMO_ARGS ?=
demo: venv
	$(BIN)/mbsd-twin demo --duration $(DEMO_SECONDS) --out out/demo $(DEMO_ARGS)

# the suite in parallel (pytest-xdist, three workers per core: many tests wait on a broker,
# a subprocess or a real-time stream; the tests with a Ray cluster on one worker, tests/conftest.py); the
# few `slow` end-to-end tests apart, one at a time (CI runs both targets)
TEST_WORKERS ?= $(shell echo $$(( 3 * $$(nproc) )))
# --durations: every run (CI's too) ends with where its time went
test: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow" --durations=30

test-slow: venv
	$(BIN)/python -m pytest -q -m slow --durations=15

lint: venv
	$(BIN)/ruff check mbsd_twin tests benchmarks
	$(BIN)/mypy mbsd_twin

# the API reference, generated from the docstrings with pdoc (the package and its FMU, twin (with its rig,
# fleet and storage) and campaign
# faces): open $(API_DIR)/index.html
# (tests/test_api_docs.py builds it too, so CI does)
API_DIR ?= out/api
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
docs: venv
	rm -rf "$(API_DIR)"
	$(BIN)/pdoc --docformat restructuredtext --footer-text "mbsd-twin $(VERSION)" -o "$(API_DIR)" mbsd_twin mbsd_twin.fmi mbsd_twin.twin mbsd_twin.rig mbsd_twin.fleet mbsd_twin.storage mbsd_twin.campaign

clean:
	rm -rf $(VENV) out
