"""Upstream's own allocator test table against fitcore, per Kubernetes version (1.36:
k8s.io/dynamic-resource-allocation v0.36, 1.37: v0.37), both fitcore engines.

Every case fitcore answers differently from upstream's default-feature allocator, or
refuses as input, must be listed with its reason in docs/semantics.md ("Upstream's
allocator test table"), and every listed case must still be so (bench/oracle/table.py).
The counts are printed.
"""

from __future__ import annotations

import pytest

from bench.oracle import oracle as oracle_client
from bench.oracle import table

pytestmark = [
    pytest.mark.oracle,
    # A cold build of the harness compiles the allocator module and its test
    # dependencies (minutes on two cores); warm, a run takes seconds.
    pytest.mark.timeout(1800),
]


@pytest.mark.parametrize("kube_version", oracle_client.kube_versions())
def test_upstream_table(kube_version: str, capsys: pytest.CaptureFixture[str]) -> None:
    records = table.run(kube_version)
    summaries = table.summarize(records, kube_version)
    with capsys.disabled():
        print()
        for summary in summaries:
            print(summary.line())
    # The table holds a few hundred cases; far fewer records means the run broke early.
    assert len(records) >= 200, f"only {len(records)} table cases ran"
    assert {s.engine for s in summaries} >= {"py"}
    known = table.listed()
    problems = [p for summary in summaries for p in table.unexplained(summary, known)]
    assert not problems, "\n".join(problems)


def test_listed_rows_are_read() -> None:
    """The docs' list is parsed (a broken table format would let every case through)."""
    known = table.listed()
    assert known, "no rows found under " + table._SECTION
    assert set(known.values()) <= {"different", "refused"}
    assert {version for version, _ in known} <= set(oracle_client.KUBE_VERSIONS)


def test_placeholders_are_made_valid() -> None:
    capacity = {"capacity": {"requests": {"capacity-0": "1"}}}
    case = {
        "slices": [{"spec": {"devices": [{"name": "device-0", "capacity": {
            "capacity-0": {"value": "4"}, "dra.example.com/capacity-1": {"value": "4"}}}]}}],
        "claims": [{"metadata": {"name": "claim-0"}, "spec": {"devices": {
            "requests": [{"name": "req-0", "firstAvailable": [{"name": "subReq-0", **capacity},
                                                              {"name": "subReq-1"}]},
                         {"name": "req-1", "exactly": capacity},
                         {"name": "req-2", "exactly": {"allocationMode": "All", "count": 1}}],
            "constraints": [{"requests": ["req-0/subReq-1", "req-1"]}],
            "config": [{"requests": ["req-0/subReq-0"]}]}}}],
        "allocated": {"consumed": [{"device": "device-0", "capacity": {"capacity-0": "1"}}]}}
    valid = table.make_valid(case)
    devices = valid["claims"][0]["spec"]["devices"]
    assert [s["name"] for s in devices["requests"][0]["firstAvailable"]] == \
        ["subreq-0", "subreq-1"]
    assert devices["requests"][1]["name"] == "req-1"
    assert devices["requests"][2]["exactly"] == {"allocationMode": "All"}
    assert devices["constraints"][0]["requests"] == ["req-0/subreq-1", "req-1"]
    assert devices["config"][0]["requests"] == ["req-0/subreq-0"]
    assert valid["claims"][0]["metadata"]["namespace"] == "default"
    assert list(valid["slices"][0]["spec"]["devices"][0]["capacity"]) == \
        ["capacity_0", "dra.example.com/capacity_1"]
    for body in (devices["requests"][0]["firstAvailable"][0], devices["requests"][1]["exactly"]):
        assert body["capacity"]["requests"] == {"capacity_0": "1"}
    assert valid["allocated"]["consumed"][0]["capacity"] == {"capacity_0": "1"}
    assert case["claims"][0]["metadata"] == {"name": "claim-0"}  # the input is not changed


def test_classify() -> None:
    def record(ours: dict, theirs: dict) -> table.Record:
        return table.Record("case", {}, {"py": ours}, theirs)

    dev = {"request": "r", "driver": "d", "pool": "p", "device": "x", "adminAccess": False,
           "shared": True, "consumedCapacity": {"mem": "1Gi"}}
    other = {**dev, "consumedCapacity": {"mem": "1024Mi"}}  # the same amount
    fits = {"verdict": "fits", "results": [[dev]]}
    assert table.classify(record(fits, {"verdict": "fits", "results": [[other]]}), "py") == \
        "exact"
    assert table.classify(record(fits, {"verdict": "fits", "results": [[{**dev, "device": "y"}]]}),
                          "py") == "same verdict"
    assert table.classify(record(fits, {"verdict": "no-fit", "results": None}), "py") == \
        "different"
    assert table.classify(record({"verdict": "refused"}, fits), "py") == "refused"
