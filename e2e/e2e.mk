# e2e suite (included by the Makefile): the local control plane, built from Go modules and
# cached under $(FITGATE_CACHE), then `pytest e2e` against it. See e2e/README.md.
#   make e2e            build (warm: skipped) + run the e2e tests on Kubernetes 1.37
#   make e2e-1.36       the same cluster on Kubernetes 1.36: the cluster, smoke and
#                       provisioning tests (E2E_OLD_KUBE_TESTS)
#   make e2e-build      only build/cache the binaries; prints per-component and total time
#                       (FITGATE_KUBE_VERSION=1.36 for the 1.36 ones)
#   make e2e-cluster    start the local cluster in the foreground (Ctrl-C stops it)
#   make e2e-karpenter  build Karpenter (kwok provider) + run e2e/karpenter on a cluster of
#                       its own (Karpenter instead of cluster-autoscaler); not in `make e2e`,
#                       in `make test` (after e2e-1.36), figures in its own terminal section
# Cluster startup is bounded per component, so the per-test timeout covers only the test
# body (timeout_func_only); the cold build runs before pytest, outside any test timeout.

E2E_PYTEST_ARGS ?= -q
# The older Kubernetes minor still supported, and what runs on it.
E2E_OLD_KUBE := 1.36
E2E_OLD_KUBE_TESTS := e2e/tests/test_cluster.py e2e/tests/test_smoke.py e2e/tests/test_provisioning.py \
	e2e/tests/test_workdir.py

.PHONY: e2e-build e2e-build-$(E2E_OLD_KUBE) e2e-$(E2E_OLD_KUBE) e2e-cluster-down \
	e2e-build-karpenter e2e-karpenter

e2e-build: setup
	@start=$$(date +%s); $(PY) -m e2e.cluster.local build; rc=$$?; \
	echo "e2e-build: binaries ready in $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

e2e: e2e-build
	@start=$$(date +%s); \
	$(PY) -m pytest e2e --ignore=e2e/karpenter $(E2E_PYTEST_ARGS) -o timeout_func_only=true \
		-p no:cacheprovider; rc=$$?; \
	echo "e2e: pytest (cluster start, tests, teardown) finished in $$(( $$(date +%s) - start ))s"; \
	exit $$rc

e2e-build-$(E2E_OLD_KUBE): setup
	@start=$$(date +%s); FITGATE_KUBE_VERSION=$(E2E_OLD_KUBE) $(PY) -m e2e.cluster.local build; \
	rc=$$?; echo "e2e-build-$(E2E_OLD_KUBE): binaries ready in $$(( $$(date +%s) - start ))s (exit $$rc)"; \
	exit $$rc

e2e-$(E2E_OLD_KUBE): e2e-build-$(E2E_OLD_KUBE)
	@start=$$(date +%s); \
	FITGATE_KUBE_VERSION=$(E2E_OLD_KUBE) $(PY) -m pytest $(E2E_OLD_KUBE_TESTS) $(E2E_PYTEST_ARGS) \
		-o timeout_func_only=true -p no:cacheprovider; rc=$$?; \
	echo "e2e-$(E2E_OLD_KUBE): pytest on Kubernetes $(E2E_OLD_KUBE) finished in $$(( $$(date +%s) - start ))s"; \
	exit $$rc

e2e-build-karpenter: e2e-build
	@start=$$(date +%s); $(PY) -c 'from e2e.cluster.local import build; build.ensure(["karpenter"])'; \
	rc=$$?; echo "e2e-build-karpenter: Karpenter ready in $$(( $$(date +%s) - start ))s (exit $$rc)"; \
	exit $$rc

e2e-karpenter: e2e-build-karpenter
	@start=$$(date +%s); \
	$(PY) -m pytest e2e/karpenter $(E2E_PYTEST_ARGS) -o timeout_func_only=true \
		-p no:cacheprovider; rc=$$?; \
	echo "e2e-karpenter: pytest (cluster start, tests, teardown) finished in $$(( $$(date +%s) - start ))s"; \
	exit $$rc

e2e-cluster: e2e-build
	$(PY) -m e2e.cluster.local up

e2e-cluster-down:
	$(PY) -m e2e.cluster.local down

TEST_TARGETS += e2e e2e-$(E2E_OLD_KUBE) e2e-karpenter
