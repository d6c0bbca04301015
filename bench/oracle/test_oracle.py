"""Hand-written cases whose answers follow from the DRA semantics, run through the oracle.

They check the oracle (and our reading of upstream) before fitcore is compared against it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from oracle import Oracle, OracleError

pytestmark = [
    pytest.mark.oracle,
    # The first test may build the oracle from a cold cache (minutes on two cores).
    pytest.mark.timeout(900),
]

DRIVER = "gpu.example.com"


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    with Oracle.start() as running:
        yield running


# -- builders for plain API objects ------------------------------------------------------


def node(name: str = "n1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


def device(name: str, **fields: Any) -> dict[str, Any]:
    """A device; attrs={"pcieRoot": "r0"} become string attributes."""
    attrs = fields.pop("attrs", {})
    out: dict[str, Any] = {"name": name, **fields}
    if attrs:
        out["attributes"] = {key: {"string": value} for key, value in attrs.items()}
    return out


def rslice(
    name: str,
    devices: list[dict[str, Any]],
    node_name: str = "n1",
    pool: str | None = None,
    count: int = 1,
    generation: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {
                "name": pool or node_name,
                "generation": generation,
                "resourceSliceCount": count,
            },
            "nodeName": node_name,
            "devices": devices,
            **spec,
        },
    }


def dclass(name: str = "gpu", *exprs: str) -> dict[str, Any]:
    exprs = exprs or (f"device.driver == '{DRIVER}'",)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
    }


def exactly(name: str, count: int | None = None, cls: str = "gpu", **fields: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": cls, **fields}
    if count is not None:
        request["count"] = count
    return {"name": name, "exactly": request}


Obj = dict[str, Any]


def claim(name: str, *requests: Obj, constraints: list[Obj] | None = None) -> Obj:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def allocated(name: str, *devices: str, pool: str = "n1", **result: Any) -> dict[str, Any]:
    """A claim whose status allocates the named devices (request "r")."""
    out = claim(name, exactly("r"))
    out["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "r", "driver": DRIVER, "pool": pool, "device": d, **result}
                    for d in devices
                ]
            }
        }
    }
    return out


def case(slices: list[Obj], claims: list[Obj], **extra: Any) -> Obj:
    return {
        "id": extra.pop("id", "case"),
        "mode": "node",
        "node": extra.pop("node", node()),
        "slices": slices,
        "classes": extra.pop("classes", [dclass()]),
        "allocated": extra.pop("allocated", []),
        "claims": claims,
        **extra,
    }


def devices_of(answer: dict[str, Any], claim_index: int = 0) -> list[str]:
    return [r["device"] for r in answer["results"][claim_index]]


def fits(answer: dict[str, Any]) -> bool:
    assert answer["error"] is None, answer
    return bool(answer["fits"])


MATCH_ROOT = [{"matchAttribute": f"{DRIVER}/pcieRoot"}]


# -- the oracle itself -------------------------------------------------------------------


def test_info_reports_the_1_36_line_and_its_default_features(oracle: Oracle) -> None:
    info = oracle.info()
    assert info["modules"]["k8s.io/dynamic-resource-allocation"].startswith("v0.36.")
    assert info["features"] == {
        "AdminAccess": True,
        "ConsumableCapacity": True,
        "DeviceBindingAndStatus": True,
        "DeviceTaints": True,
        "ListTypeAttributes": False,
        "PartitionableDevices": True,
        "PrioritizedList": True,
    }
    assert info["allocator"] == "incubating"


def test_invalid_lines_answer_with_an_error_and_the_stream_goes_on(oracle: Oracle) -> None:
    bad_key, bad_feature, ok = oracle.ask_many(
        [
            {"id": 1, "nodes_typo": []},
            case([], [], id=2, features={"NoSuchGate": True}),
            case([rslice("s", [device("g0")])], [claim("c", exactly("g"))], id=3),
        ]
    )
    assert bad_key["id"] == 1 and "unknown key" in bad_key["error"]
    assert bad_feature["id"] == 2 and "unknown feature" in bad_feature["error"]
    assert ok["id"] == 3 and fits(ok)


def test_repeat_reports_every_timing_and_their_median(oracle: Oracle) -> None:
    answer = oracle.ask(case([rslice("s", [device("g0")])], [claim("c", exactly("g"))], repeat=5))
    assert fits(answer)
    assert len(answer["nanos_all"]) == 5
    assert answer["nanos"] == sorted(answer["nanos_all"])[2]
    assert answer["invocations"] >= 1


def test_feature_override_picks_the_stable_allocator(oracle: Oracle) -> None:
    off = {"ConsumableCapacity": False, "DRADeviceBindingAndStatus": False}
    answer = oracle.ask(
        case([rslice("s", [device("g0")])], [claim("c", exactly("g"))], features=off)
    )
    assert fits(answer) and answer["allocator"] == "stable"


# -- semantics ---------------------------------------------------------------------------


def test_match_attribute_needs_two_gpus_on_one_pcie_root(oracle: Oracle) -> None:
    two = claim("c", exactly("g", 2), constraints=MATCH_ROOT)
    same = [
        rslice(
            "s", [device("g0", attrs={"pcieRoot": "r0"}), device("g1", attrs={"pcieRoot": "r0"})]
        )
    ]
    split = [
        rslice(
            "s", [device("g0", attrs={"pcieRoot": "r0"}), device("g1", attrs={"pcieRoot": "r1"})]
        )
    ]
    # g0 is alone on r0: the search has to give it up and take g1+g2.
    later = [
        rslice(
            "s",
            [
                device("g0", attrs={"pcieRoot": "r0"}),
                device("g1", attrs={"pcieRoot": "r1"}),
                device("g2", attrs={"pcieRoot": "r1"}),
            ],
        )
    ]
    a_same, a_split, a_later = oracle.ask_many(
        [case(same, [two]), case(split, [two]), case(later, [two])]
    )
    assert fits(a_same) and devices_of(a_same) == ["g0", "g1"]
    assert not fits(a_split) and a_split["results"] is None
    assert fits(a_later) and devices_of(a_later) == ["g1", "g2"]


def test_exact_count_three_of_two_does_not_fit(oracle: Oracle) -> None:
    answer = oracle.ask(
        case([rslice("s", [device("g0"), device("g1")])], [claim("c", exactly("g", 3))])
    )
    assert not fits(answer)


def test_more_than_32_devices_in_one_claim_is_an_error_not_a_misfit(oracle: Oracle) -> None:
    slices = [rslice("s", [device(f"g{i}") for i in range(40)])]
    answer = oracle.ask(case(slices, [claim("c", exactly("g", 33))]))
    assert not answer["fits"] and "exceeds the claim limit of 32" in answer["error"]
    assert fits(oracle.ask(case(slices, [claim("c", exactly("g", 32))])))


def test_all_mode_takes_every_matching_device_and_fails_if_one_is_in_use(oracle: Oracle) -> None:
    slices = [rslice("s", [device("g0"), device("g1"), device("g2")])]
    everything = claim("c", exactly("g", allocationMode="All"))
    free, busy = oracle.ask_many(
        [case(slices, [everything]), case(slices, [everything], allocated=[allocated("x", "g1")])]
    )
    assert fits(free) and devices_of(free) == ["g0", "g1", "g2"]
    assert not fits(busy)


def test_first_available_falls_back_to_the_next_subrequest(oracle: Oracle) -> None:
    slices = [rslice("s", [device("small0", attrs={"model": "small"})])]
    request = {
        "name": "g",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": "gpu",
                "selectors": [
                    {"cel": {"expression": f"device.attributes['{DRIVER}'].model == 'big'"}}
                ],
            },
            {"name": "small", "deviceClassName": "gpu"},
        ],
    }
    answer = oracle.ask(case(slices, [claim("c", request)]))
    assert fits(answer)
    assert answer["results"][0][0]["request"] == "g/small"


def partitioned_gpu() -> list[dict[str, Any]]:
    """One 80Gi GPU as a pool: a counter slice and a device slice (whole or two halves)."""
    counters = rslice(
        "counters",
        [],
        pool="gpu0",
        count=2,
        sharedCounters=[{"name": "mem", "counters": {"memory": {"value": "80Gi"}}}],
    )
    del counters["spec"]["devices"]

    def part(name: str, size: str) -> dict[str, Any]:
        return device(
            name, consumesCounters=[{"counterSet": "mem", "counters": {"memory": {"value": size}}}]
        )

    devices = rslice(
        "devices",
        [part("whole", "80Gi"), part("half0", "40Gi"), part("half1", "40Gi")],
        pool="gpu0",
        count=2,
    )
    return [counters, devices]


def test_shared_counters_exhausted_by_an_allocated_partition(oracle: Oracle) -> None:
    slices = partitioned_gpu()
    one = claim("c", exactly("g"))
    want_two = claim("t", exactly("g", 2))
    busy = [allocated("x", "half0", pool="gpu0")]
    a_free, a_whole_busy, a_two_busy = oracle.ask_many(
        [
            case(slices, [one]),
            case(slices, [one], allocated=busy),
            case(slices, [want_two], allocated=busy),
        ]
    )
    assert fits(a_free) and devices_of(a_free) == ["whole"]
    # half0 holds 40Gi: "whole" no longer fits the counter set, half1 still does.
    assert fits(a_whole_busy) and devices_of(a_whole_busy) == ["half1"]
    # Two partitions would need 80Gi more.
    assert not fits(a_two_busy)


def shared_nic(value: str = "40Gi") -> list[dict[str, Any]]:
    policy = {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    return [
        rslice(
            "s",
            [
                device(
                    "nic0",
                    allowMultipleAllocations=True,
                    capacity={"bandwidth": {"value": value, "requestPolicy": policy}},
                )
            ],
        )
    ]


def bandwidth(amount: str) -> dict[str, Any]:
    return exactly("n", capacity={"requests": {"bandwidth": amount}})


def test_consumable_capacity_rounds_up_to_the_request_policy(oracle: Oracle) -> None:
    answer = oracle.ask(case(shared_nic(), [claim("c", bandwidth("1500Mi"))]))
    assert fits(answer)
    (result,) = answer["results"][0]
    assert result["device"] == "nic0"
    assert result["consumedCapacity"] == {"bandwidth": "2Gi"}
    assert result["shareID"]


def test_consumable_capacity_counts_earlier_shares(oracle: Oracle) -> None:
    share = allocated(
        "x",
        "nic0",
        shareID="11111111-2222-3333-4444-555555555555",
        consumedCapacity={"bandwidth": "39Gi"},
    )
    one, two, default = oracle.ask_many(
        [
            case(shared_nic(), [claim("c", bandwidth("1Gi"))], allocated=[share]),
            case(shared_nic(), [claim("c", bandwidth("2Gi"))], allocated=[share]),
            # No request: the policy's default (1Gi) is consumed.
            case(shared_nic(), [claim("c", exactly("n"))], allocated=[share]),
        ]
    )
    assert fits(one)
    assert not fits(two)
    assert fits(default) and default["results"][0][0]["consumedCapacity"] == {"bandwidth": "1Gi"}


def test_no_schedule_taint_must_be_tolerated_and_effect_none_is_ignored(oracle: Oracle) -> None:
    def tainted(effect: str) -> list[dict[str, Any]]:
        return [
            rslice(
                "s", [device("g0", taints=[{"key": "broken", "value": "yes", "effect": effect}])]
            )
        ]

    plain = claim("c", exactly("g"))
    tolerant = claim("c", exactly("g", tolerations=[{"key": "broken", "operator": "Exists"}]))
    untolerated, tolerated, none = oracle.ask_many(
        [
            case(tainted("NoSchedule"), [plain]),
            case(tainted("NoSchedule"), [tolerant]),
            case(tainted("None"), [plain]),
        ]
    )
    assert not fits(untolerated)
    assert fits(tolerated)
    assert fits(none)


def test_incomplete_pool_is_skipped_and_all_mode_on_it_is_an_error(oracle: Oracle) -> None:
    incomplete = [rslice("s0", [device("g0")], count=2)]  # the pool announces a second slice
    one, everything = oracle.ask_many(
        [
            case(incomplete, [claim("c", exactly("g"))]),
            case(incomplete, [claim("c", exactly("g", allocationMode="All"))]),
        ]
    )
    assert not fits(one)
    assert not everything["fits"] and "currently being updated" in everything["error"]


def test_cel_runtime_error_is_reported_as_an_error(oracle: Oracle) -> None:
    bad = dclass("gpu", f"device.attributes['{DRIVER}'].missing == 'x'")
    answer = oracle.ask(
        case([rslice("s", [device("g0")])], [claim("c", exactly("g"))], classes=[bad])
    )
    assert answer["fits"] is False
    assert "CEL runtime error" in answer["error"]


def test_missing_device_class_is_unschedulable_like_the_scheduler_prefilter(oracle: Oracle) -> None:
    answer = oracle.ask(case([rslice("s", [device("g0")])], [claim("c", exactly("g", cls="nope"))]))
    assert not fits(answer) and "does not exist" in answer["reason"]


def test_admin_access_may_use_a_device_in_use(oracle: Oracle) -> None:
    answer = oracle.ask(
        case(
            [rslice("s", [device("g0")])],
            [claim("c", exactly("g", adminAccess=True))],
            allocated=[allocated("x", "g0")],
        )
    )
    assert fits(answer) and answer["results"][0][0]["adminAccess"] is True


def test_gang_mode_carries_allocations_to_the_next_pod(oracle: Oracle) -> None:
    slices = [
        rslice("s1", [device("a0"), device("a1")], node_name="n1"),
        rslice("s2", [device("b0")], node_name="n2"),
    ]
    gang = {
        "id": "gang",
        "mode": "gang",
        "nodes": [node("n1"), node("n2")],
        "slices": slices,
        "classes": [dclass()],
        "allocated": [],
        "pods": [
            {"name": "p0", "claims": [claim("c0", exactly("g", 2))]},
            {"name": "p1", "claims": [claim("c1", exactly("g"))]},  # n1 is used up: n2
            {"name": "p2", "claims": [claim("c2", exactly("g"))]},  # nothing left
            {"name": "p3", "node": "n1", "claims": [claim("c3", exactly("g"))]},
        ],
    }
    answer = oracle.ask(gang)
    assert answer["error"] is None
    placed = {p["name"]: p["node"] for p in answer["pods"]}
    assert placed == {"p0": "n1", "p1": "n2", "p2": None, "p3": None}
    assert answer["placed"] == 2
    assert answer["calls"] == 1 + 2 + 2 + 1
    assert [r["device"] for r in answer["pods"][0]["results"][0]] == ["a0", "a1"]
    assert answer["pods"][1]["results"][0][0]["device"] == "b0"


@pytest.mark.parametrize(("how", "calls"), [("first", 1 + 2), ("scheduler", 3 + 3)],
                         ids=["first-fit", "scheduler-filtering"])
def test_gang_mode_filters_nodes_like_the_scheduler(oracle: Oracle, how: str, calls: int) -> None:
    # Under 100 nodes the scheduler filters every node before it picks one.
    slices = [rslice(f"s{i}", [device(f"d{i}")], node_name=f"n{i}") for i in range(3)]
    gang = {"id": how, "mode": "gang", "nodes": [node(f"n{i}") for i in range(3)],
            "slices": slices, "classes": [dclass()], "allocated": [], "filter": how,
            "pods": [{"name": f"p{i}", "claims": [claim(f"c{i}", exactly("g"))]}
                     for i in range(2)]}
    answer = oracle.ask(gang)
    assert answer["error"] is None and answer["placed"] == 2
    assert answer["calls"] == calls


def test_gang_mode_rejects_an_unknown_filter(oracle: Oracle) -> None:
    answer = oracle.ask({"id": "x", "mode": "gang", "nodes": [], "slices": [], "classes": [],
                         "allocated": [], "pods": [], "filter": "best"})
    assert "filter" in answer["error"]


def test_closed_oracle_refuses_to_answer() -> None:
    running = Oracle.start()
    running.close()
    with pytest.raises(OracleError):
        running.ask({"id": "late", "mode": "info"})


def test_only_the_newest_generation_of_a_pool_counts(oracle: Oracle) -> None:
    slices = [
        rslice("old", [device("g-old")], generation=1),
        rslice("new", [device("g-new")], generation=2),
    ]
    answer = oracle.ask(case(slices, [claim("c", exactly("g"))]))
    assert fits(answer) and devices_of(answer) == ["g-new"]


def test_invalid_pool_is_a_node_local_reason_not_an_error(oracle: Oracle) -> None:
    duplicate = [rslice("s0", [device("g0")], count=2), rslice("s1", [device("g0")], count=2)]
    answer = oracle.ask(case(duplicate, [claim("c", exactly("g"))]))
    assert not fits(answer) and "invalid resource pools" in answer["reason"]


def test_gang_mode_carries_consumed_counters_to_the_next_pod(oracle: Oracle) -> None:
    gang = {
        "id": "counters",
        "mode": "gang",
        "nodes": [node("n1")],
        "slices": partitioned_gpu(),
        "classes": [dclass()],
        "allocated": [],
        "pods": [
            {"name": "p0", "claims": [claim("c0", exactly("g"))]},  # takes "whole": 80Gi
            {"name": "p1", "claims": [claim("c1", exactly("g"))]},  # no memory left
        ],
    }
    p0, p1 = oracle.ask(gang)["pods"]
    assert p0["node"] == "n1" and p0["results"][0][0]["device"] == "whole"
    assert p1["node"] is None and p1["error"] is None


def hopeless_search() -> dict[str, Any]:
    """10 of 30 identical devices, then a request the constraint always rejects: upstream
    tries every combination of the 10 (no symmetry breaking), C(30, 10) = 30 million."""
    devices = [device(f"a{i}", attrs={"r": "a"}) for i in range(30)]
    devices.append(device("b0", attrs={"r": "b"}))
    classes = [dclass("gpu"), dclass("bee", f"device.attributes['{DRIVER}'].r == 'b'")]
    hopeless = claim(
        "c",
        exactly("a", 10),
        exactly("b", 1, cls="bee"),
        constraints=[{"matchAttribute": f"{DRIVER}/r"}],
    )
    return case([rslice("s", devices)], [hopeless], classes=classes)


def test_filter_timeout_is_reported_as_a_timeout(oracle: Oracle) -> None:
    answer = oracle.ask({**hopeless_search(), "timeout_ms": 200})
    assert answer["fits"] is False and answer["error"] is None
    assert answer["timeout"] is True
    assert answer["invocations"] > 1000


def test_client_timeout_kills_the_oracle() -> None:
    running = Oracle.start()
    with pytest.raises(OracleError, match="no answer"):
        running.ask({**hopeless_search(), "timeout_ms": 0}, timeout=0.5)
    with pytest.raises(OracleError, match="closed"):
        running.info()


def test_distinct_attribute_in_1_36_only_compares_with_each_requests_last_device(
    oracle: Oracle,
) -> None:
    """Upstream quirk pinned on purpose: in v0.36.x distinctAttribute keeps one value per
    request name (a map), so the third device of one request is compared with the second
    only and may repeat the first one's value. Newer upstream keeps every value; if this
    test fails after a module bump, fitcore's semantics must follow."""
    slices = [
        rslice(
            "s",
            [
                device("g0", attrs={"r": "a"}),
                device("g1", attrs={"r": "b"}),
                device("g2", attrs={"r": "a"}),
            ],
        )
    ]
    distinct = [{"distinctAttribute": f"{DRIVER}/r"}]
    three, two_requests = oracle.ask_many(
        [
            case(slices, [claim("c", exactly("g", 3), constraints=distinct)]),
            # Across requests the values are compared: two "a" devices are refused.
            case(
                [rslice("s", [device("g0", attrs={"r": "a"}), device("g1", attrs={"r": "a"})])],
                [claim("c", exactly("x"), exactly("y"), constraints=distinct)],
            ),
        ]
    )
    assert fits(three) and devices_of(three) == ["g0", "g1", "g2"]
    assert not fits(two_requests)
