# Included by the top Makefile: benchmarks and the upstream-allocator oracle.

## Build the upstream-allocator oracle (Go, cached under $(FITGATE_CACHE)/oracle), for
## Kubernetes 1.36 (k8s.io/dynamic-resource-allocation v0.36) and 1.37 (v0.37).
## Also the harness that runs upstream's own allocator test table against fitcore
## (bench/oracle/harness, cached likewise).
oracle:
	FITGATE_ORACLE_KUBE=1.36 bash bench/oracle/build.sh
	FITGATE_ORACLE_KUBE=1.37 bash bench/oracle/build.sh
	FITGATE_ORACLE_KUBE=1.36 bash bench/oracle/harness/build.sh
	FITGATE_ORACLE_KUBE=1.37 bash bench/oracle/harness/build.sh

## The oracle's own tests: hand-written DRA cases with known answers; fitcore against the
## oracle (differential, gang soundness, version differences) and against upstream's own
## test table (test_table.py prints exact / same verdict / different counts per version).
oracle-test: setup oracle
	$(PY) -m pytest bench/oracle -q

.PHONY: oracle-test
TEST_TARGETS += oracle-test

## Benchmarks (print tables; figures are for the closing notes, not assertions).
##   make bench-alloc     compiled core vs reference on per-node layouts
##   make bench-gang      64-pod gang decisions over 100 / 1,000 / 5,000 nodes, then
##                        8/64/256-pod gangs on realistic 1,000 / 5,000 / 10,000-node
##                        clusters through the Inventory, and its memory for 10,000
##   make bench-compare   fitcore vs the upstream allocator (writes bench/results/compare.json)
##   make bench-load      `fitgate fit`'s inventory load from YAML and JSON (kind: List
##                        files of realistic 1,000 / 5,000-node clusters, in a tmp dir)
##   make bench-serve     serve's inventory with 5,000 cached nodes: memory, per-event
##                        update time, event to decision (not part of `make test`)
bench-alloc: setup
	$(PY) -m bench.alloc

bench-gang: setup
	$(PY) -m bench.gang
	$(PY) -m bench.realistic
	$(PY) -m bench.realistic --memory 10000

bench-compare: setup oracle
	$(PY) -m bench.compare

bench-serve: setup
	$(PY) -m bench.serve

## What the compile-time cost estimate of a CEL selector adds to compiling it.
bench-celcost: setup
	$(PY) -m bench.celcost

## fitgate fit's inventory load from YAML and JSON, 5,000-node realistic clusters.
bench-load: setup
	$(PY) -m bench.load

bench: bench-alloc bench-gang bench-compare

.PHONY: bench-alloc bench-gang bench-compare bench-serve bench-celcost bench-load bench

## Webhook latency over TLS on loopback at fixed request rates, 5,000-node inventory
## (not part of `make test`; about 2 minutes).
bench-webhook: setup
	$(PY) -m bench.webhook

.PHONY: bench-webhook

## The real gate and check (serve's own wiring over the fake API client) deciding a burst
## of 1,000 pending Workloads on realistic 1,000 and 5,000-node clusters while node,
## slice, claim and pod events keep arriving (about 10 minutes on 2 busy cores; not part
## of `make test`). BENCH_CONTROLLER_NODES=1000,5000,10000 adds the largest size.
BENCH_CONTROLLER_NODES ?= 1000,5000
bench-controller: setup
	$(PY) -m bench.controller --nodes $(BENCH_CONTROLLER_NODES)

.PHONY: bench-controller
