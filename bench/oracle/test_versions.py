"""What the default-feature allocator of 1.37 answers differently from 1.36, case by case:
each case is asked of both oracles (k8s.io/dynamic-resource-allocation v0.36 and v0.37)
and of fitcore following each version (both engines). docs/semantics.md lists them.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.oracle import oracle as oracle_client
from bench.oracle.test_differential import fitcore_fits
from fitcore import api

GPU = "gpu.example.com"
CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU}'"}}]}}


def _slice(devices: list[dict[str, Any]], counters: dict[str, str] | None = None
           ) -> list[dict[str, Any]]:
    pool = {"name": "p", "generation": 0, "resourceSliceCount": 2 if counters else 1}
    out = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {"driver": GPU, "pool": pool, "nodeName": "n1", "devices": devices}}]
    if counters:
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": "c"},
                    "spec": {"driver": GPU, "pool": pool, "nodeName": "n1", "sharedCounters": [
                        {"name": "cs", "counters": {k: {"value": v}
                                                    for k, v in counters.items()}}]}})
    return out


def _held(device: str, consumed: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "r", "driver": GPU, "pool": "p", "device": device,
                              "shareID": "11111111-1111-1111-1111-111111111111"}
    if consumed:
        result["consumedCapacity"] = {"memory": consumed}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "held", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "gpu"}}]}},
            "status": {"allocation": {"devices": {"results": [result]}}}}


def _claim(exactly: dict[str, Any], constraints: list[dict[str, Any]] | None = None
           ) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [{"name": "r", "exactly": {
        "deviceClassName": "gpu", **exactly}}]}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": devices}}


def _case(slices: list[dict[str, Any]], claim: dict[str, Any],
          allocated: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": "v", "mode": "node",
            "node": {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
            "slices": slices, "classes": [CLASS], "allocated": allocated or [],
            "claims": [claim]}


def _shared(name: str, value: str = "8Gi", **extra: Any) -> dict[str, Any]:
    return {"name": name, "allowMultipleAllocations": True,
            "capacity": {"memory": {"value": value}}, **extra}


# id -> (case, fits on 1.36, fits on 1.37)
CASES: dict[str, tuple[dict[str, Any], bool, bool]] = {
    # All over shared devices: one has 2Gi left of 8Gi, the request takes 4Gi of each.
    "all-over-shared-capacity": (_case(
        _slice([_shared("d0"), _shared("d1")]),
        _claim({"allocationMode": "All", "capacity": {"requests": {"memory": "4Gi"}}}),
        [_held("d0", "6Gi")]), True, False),
    # A shared device already allocated without consumed capacity, consuming the whole
    # counter set: 1.36 charges its counters again, 1.37 knows it is shared.
    "shared-device-counters-once": (_case(
        _slice([{"name": "d0", "allowMultipleAllocations": True, "consumesCounters": [
            {"counterSet": "cs", "counters": {"mem": {"value": "4"}}}]}],
            counters={"mem": "4"}),
        _claim({"count": 1}), [_held("d0", None)]), False, True),
}


@pytest.fixture(scope="module")
def oracles():
    with oracle_client.Oracle.start(kube="1.36") as o36, \
            oracle_client.Oracle.start(kube="1.37") as o37:
        yield {"1.36": o36, "1.37": o37}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(CASES))
def test_version_difference(oracles, name: str) -> None:
    case, fits36, fits37 = CASES[name]
    engines = ["py", "c"] if api.compiled_available() else ["py"]
    for kube, expected in (("1.36", fits36), ("1.37", fits37)):
        answer = oracles[kube].ask(case)
        assert bool(answer["fits"]) == expected, (kube, answer)
        for engine in engines:
            ours, verdict = fitcore_fits(case, engine, kube)
            assert ours == expected, (kube, engine, verdict)


def _numa(name: str, value: int) -> dict[str, Any]:
    return {"name": name, "attributes": {"numa": {"int": value}}}


@pytest.mark.oracle
def test_negative_capacity_request_aborts_in_1_37(oracles) -> None:
    """1.36 takes a negative capacity request as it is (and allocates); 1.37 aborts the
    allocation with an error. fitcore follows each."""
    case = _case(_slice([_shared("d0")]),
                 _claim({"capacity": {"requests": {"memory": "-1Gi"}}}))
    a36, a37 = oracles["1.36"].ask(case), oracles["1.37"].ask(case)
    assert a36["fits"] and not a36.get("error"), a36
    assert not a37["fits"] and "negative" in (a37.get("error") or ""), a37
    engines = ["py", "c"] if api.compiled_available() else ["py"]
    for engine in engines:
        assert fitcore_fits(case, engine, "1.36") == (True, "fits")
        assert fitcore_fits(case, engine, "1.37") == (False, "error")


@pytest.mark.oracle
def test_distinct_attribute_within_one_request(oracles) -> None:
    """One request for 3 devices with distinctAttribute over values 0, 1, 0: v0.36 lets it
    through, v0.37 does not. fitcore refuses on both (docs/semantics.md: it follows the
    API's meaning, and 1.37)."""
    case = _case(_slice([_numa("d0", 0), _numa("d1", 1), _numa("d2", 0)]),
                 _claim({"count": 3}, [{"distinctAttribute": f"{GPU}/numa"}]))
    assert oracles["1.36"].ask(case)["fits"]
    assert not oracles["1.37"].ask(case)["fits"]
    engines = ["py", "c"] if api.compiled_available() else ["py"]
    for engine in engines:
        for kube in ("1.36", "1.37"):
            assert fitcore_fits(case, engine, kube)[0] is False
