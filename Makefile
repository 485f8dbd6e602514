# Two entry points for a fresh machine (Python 3.11): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test venv lint clean

$(BIN)/mbsd-twin: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	$(BIN)/python -c "from mbsd_twin.warmup import warm; print(f'compiled kernels cached in {warm():.0f} s')"
	touch $@

venv: $(BIN)/mbsd-twin

DEMO_SECONDS ?= 20
DEMO_ARGS ?=
demo: venv
	$(BIN)/mbsd-twin demo --duration $(DEMO_SECONDS) --out out/demo $(DEMO_ARGS)

test: venv
	$(BIN)/python -m pytest -q

lint: venv
	$(BIN)/ruff check mbsd_twin tests benchmarks
	$(BIN)/mypy mbsd_twin

clean:
	rm -rf $(VENV) out
