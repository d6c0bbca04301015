# e2e suite (included by the Makefile): the local control plane, built from Go modules and
# cached under $(FITGATE_CACHE), then `pytest e2e` against it. See e2e/README.md.
#   make e2e            build (warm: skipped) + run the e2e tests
#   make e2e-build      only build/cache the binaries; prints per-component and total time
#   make e2e-cluster    start the local cluster in the foreground (Ctrl-C stops it)
# Cluster startup is bounded per component, so the per-test timeout covers only the test
# body (timeout_func_only); the cold build runs before pytest, outside any test timeout.

E2E_PYTEST_ARGS ?= -q

.PHONY: e2e-build e2e-cluster-down

e2e-build: setup
	@start=$$(date +%s); $(PY) -m e2e.cluster.local build; rc=$$?; \
	echo "e2e-build: binaries ready in $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

e2e: e2e-build
	@start=$$(date +%s); \
	$(PY) -m pytest e2e $(E2E_PYTEST_ARGS) -o timeout_func_only=true -p no:cacheprovider; rc=$$?; \
	echo "e2e: pytest (cluster start, tests, teardown) finished in $$(( $$(date +%s) - start ))s"; \
	exit $$rc

e2e-cluster: e2e-build
	$(PY) -m e2e.cluster.local up

e2e-cluster-down:
	$(PY) -m e2e.cluster.local down

TEST_TARGETS += e2e
