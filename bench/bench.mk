# Included by the top Makefile: benchmarks and the upstream-allocator oracle.

## Build the upstream-allocator oracle (Go, cached under $(FITGATE_CACHE)/oracle).
oracle:
	bash bench/oracle/build.sh

## The oracle's own tests: hand-written DRA cases with known answers.
oracle-test: setup oracle
	$(PY) -m pytest bench/oracle -q

.PHONY: oracle-test
TEST_TARGETS += oracle-test
