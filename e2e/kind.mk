# The offline kind cluster (included by the Makefile). See e2e/cluster/kind/README.md.
#   make kind-node      build the node image (binaries from Go modules, Debian bases; warm:
#                       reused) and print its tag
#   make kind-up        build, create the cluster `fitgate` and print its kubeconfig path
#   make kind-down      delete it
#   make demo-kind      build (warm: reuse), create a cluster, install the stack, run one
#                       DRA Job through fitgate printing what happens, delete the cluster
#                       (e2e/demo_kind.py)
# `make e2e` (part of `make test`) builds the node image first, outside any test timeout;
# e2e/tests/test_kind.py creates its own cluster on it and deletes it at the end.

.PHONY: kind-node kind-up kind-down demo-kind

kind-node: setup
	@start=$$(date +%s); nice -n 10 $(PY) -m e2e.cluster.kind build; rc=$$?; \
	echo "kind-node: node image ready in $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc

kind-up: kind-node
	$(PY) -m e2e.cluster.kind up

kind-down:
	$(PY) -m e2e.cluster.kind down

demo-kind: setup
	$(PY) -m e2e.demo_kind

e2e: kind-node
