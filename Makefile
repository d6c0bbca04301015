# fitgate: the two commands a new user needs are `make demo` and `make test`.
# Everything they need is installed here; build caches live outside the repository
# (FITGATE_CACHE, default ~/.cache/fitgate).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export FITGATE_CACHE ?= $(HOME)/.cache/fitgate

.PHONY: demo test setup lint unit clean schema

$(VENV)/.installed: pyproject.toml setup.py $(wildcard fitcore/*.pyx fitcore/*.pxd)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

## The main job: fit a bundled example gang against a bundled inventory.
demo: setup
	$(VENV)/bin/fitgate fit --inventory examples/inventory --shapes examples/shapes \
		--workload examples/workload.yaml

lint: setup
	$(VENV)/bin/ruff check fitcore admission tests bench e2e
	$(VENV)/bin/mypy fitcore admission
	$(VENV)/bin/lint-imports

unit: setup
	$(PY) -m pytest tests -q

# Sub-makefiles append their suites to TEST_TARGETS (e2e/e2e.mk, bench/bench.mk).
TEST_TARGETS := lint unit
-include e2e/e2e.mk
-include bench/bench.mk

## The whole test suite: lint, unit and property tests, oracle differential, e2e.
test: setup
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory $(TEST_TARGETS); rc=$$?; \
	echo "make test: $(TEST_TARGETS) finished in $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

## Regenerate fitcore/schema.json (strict field validation) from the installed
## kubernetes-asyncio, Kueue's Workload CRD (Go module cache) and fitgate's NodeShape.
schema: setup
	GOMODCACHE=$${GOMODCACHE:-$(FITGATE_CACHE)/go/mod} $(PY) tools/gen_schema.py

clean:
	rm -rf build $(VENV) fitcore/*.c fitcore/*.so
