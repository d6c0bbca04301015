"""fitcore agrees with the upstream allocator (kube-scheduler's own code) on random cases.

Every case from fitcore.testing.case(seed) is answered by the oracle (bench/oracle, the
published k8s.io/dynamic-resource-allocation allocator) and by both fitcore engines; any
disagreement on fit / no fit fails the test and prints the case as JSON.
FITGATE_DIFF_CASES sets the number of cases (default 20,000). It runs once per Kubernetes
version the oracle is built for (1.36 and 1.37, FITGATE_ORACLE_KUBE_VERSIONS), fitcore
following the same version. Cases include multi-node slices and the claims DRA extended
resources become (fitcore.testing).
"""

from __future__ import annotations

import json
import os

import pytest

from bench.oracle import oracle as oracle_client
from fitcore import api, kube, testing, versions

CASES = int(os.environ.get("FITGATE_DIFF_CASES", "20000"))
BATCH = 500


def fitcore_fits(case: dict, engine: str, kube_version: str = "1.36"
                 ) -> tuple[bool | None, str]:
    inventory = kube.inventory(case["slices"], case["classes"], case["allocated"])
    claims = [kube.resource_claim(c) for c in case["claims"]]
    result = api.allocate(kube.node(case["node"]), inventory, claims, engine=engine,
                          budget=500_000, kube=versions.parse(kube_version))
    if result.verdict == "undecided":
        return None, result.verdict
    return result.fits, result.verdict


@pytest.fixture(scope="module", params=oracle_client.kube_versions())
def oracle(request):
    with oracle_client.Oracle.start(kube=request.param) as o:
        yield o


@pytest.mark.oracle
@pytest.mark.timeout(1800)
def test_fitcore_agrees_with_upstream_allocator(oracle) -> None:
    engines = ["py", "c"] if api.compiled_available() else ["py"]
    disagreements = []
    compared = 0
    for start in range(0, CASES, BATCH):
        cases = [testing.case(seed) for seed in range(start, min(start + BATCH, CASES))]
        answers = oracle.ask_many(cases)
        for case, answer in zip(cases, answers, strict=True):
            if answer.get("timeout"):
                continue
            upstream = bool(answer["fits"])
            for engine in engines:
                ours, verdict = fitcore_fits(case, engine, oracle.kube)
                if ours is None:
                    continue
                compared += 1
                if ours != upstream:
                    disagreements.append((case, engine, verdict, answer))
        assert not disagreements, _report(disagreements)
    assert compared >= CASES * len(engines) * 0.99, f"only {compared} comparisons were decided"


def _report(disagreements: list) -> str:
    case, engine, verdict, answer = min(disagreements, key=lambda d: len(json.dumps(d[0])))
    return (f"{len(disagreements)} disagreement(s); smallest: seed {case['id']}, fitcore "
            f"engine={engine} says {verdict}, upstream says fits={answer['fits']} "
            f"(error={answer.get('error')!r}, reason={answer.get('reason')!r})\n"
            f"{json.dumps(case)}")
