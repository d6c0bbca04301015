# fitgate: the two commands a new user needs are `make demo` and `make test`.
# Everything they need is installed here; build caches live outside the repository
# (FITGATE_CACHE, default ~/.cache/fitgate).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export FITGATE_CACHE ?= $(HOME)/.cache/fitgate

.PHONY: demo demo-offline test setup lint unit helm-bin chart-rbac clean schema

$(VENV)/.installed: pyproject.toml setup.py $(wildcard fitcore/*.pyx fitcore/*.pxd)
	@# fitcore._load links libyaml statically: its headers and static library (Debian's
	@# libyaml-dev) are needed to build; installed with apt-get when missing.
	@test -e /usr/include/yaml.h || { echo "# installing libyaml-dev (apt-get)" >&2; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libyaml-dev >&2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

## The main job: on the local control plane (built from Go modules on first use, with
## progress; cached after), install fitgate with its chart and run scenario 1 once with
## Kueue's built-in ProvisioningRequest check and once with fitgate, print the
## comparison, tear everything down (e2e/demo.py).
demo: setup
	$(PY) -m e2e.demo

## Without Go: `fitgate fit` on a bundled example gang and inventory.
demo-offline: setup
	$(VENV)/bin/fitgate fit --inventory examples/inventory --shapes examples/shapes \
		--workload examples/workload.yaml

lint: setup
	$(VENV)/bin/ruff check fitcore admission tests bench e2e
	$(VENV)/bin/mypy fitcore admission e2e
	$(VENV)/bin/lint-imports

## The helm binary the chart tests (tests/chart) render with, and promtool, which checks
## the chart's PrometheusRule: built from Go modules and cached like the local control
## plane's binaries (warm: nothing to do).
helm-bin: setup
	$(PY) -c 'from e2e.cluster.local import build; build.ensure(["helm", "promtool"])'

unit: setup helm-bin
	$(PY) -m pytest tests -q

## Regenerate the chart's RBAC rules from admission/kube/rbac.py (a unit test checks it).
chart-rbac: setup
	$(PY) -m admission.kube.rbac > charts/fitgate/files/rbac.yaml

# Sub-makefiles append their suites to TEST_TARGETS (e2e/e2e.mk, bench/bench.mk).
TEST_TARGETS := lint unit
-include e2e/e2e.mk
-include e2e/image.mk
-include e2e/kind.mk
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
