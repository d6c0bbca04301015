"""The ledger's indexes (`ledgerindex`) equal a recomputation from the store after any
sequence of events: adds, updates, heartbeats, deletes (with the final state the store
knew, or a stale or unknown one), relists that add, change and drop objects at once."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest

from admission import constants as c
from admission.check import ledger, ledgerindex, provisioning
from admission.kube import client, kinds, store

SEEDS = range(12)
NODES = [f"n{i}" for i in range(12)]
STAMPS = ["2026-12-05T10:00:00Z", "2026-12-05T10:00:00Z", "2026-12-05T10:00:05Z",
          "2026-12-05T11:00:00Z", "2026-12-05T10:30:00.5+00:00", "2026-12-05T10:00:01",
          "not a time", None]
TIMES = [None, *(ledgerindex.created_at(s) for s in STAMPS[:6]),
         datetime.datetime(2026, 12, 5, 10, 0, 2, tzinfo=datetime.UTC)]


def node(name: str, rng: random.Random, rv: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(rv),
                            "labels": rng.choice([{}, {"shape": "b200"}, {"shape": "h100"},
                                                  {"shape": "b200", "zone": "a"}])}
    if (stamp := rng.choice(STAMPS)) is not None:
        meta["creationTimestamp"] = stamp
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def pod(name: str, rng: random.Random, rv: int) -> dict[str, Any]:
    labels = {}
    if rng.random() < 0.8:
        labels[c.PLACEMENT_LABEL] = rng.choice(["uid-a", "uid-b"])
    if rng.random() < 0.4:
        labels[c.PLACEMENT_WORKLOAD_LABEL] = rng.choice(["uid-a", "uid-c"])
    spec: dict[str, Any] = {"containers": []}
    if rng.random() < 0.7:
        spec["nodeName"] = rng.choice(NODES[:4])
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": rng.choice(["ns1", "ns2"]),
                         "resourceVersion": str(rv), "labels": labels}}


def churn(s: store.Store, make: Any, names: list[str], rng: random.Random,
          steps: int, check: Any) -> None:
    """Apply `steps` random events to `s` (checking after each): ADDED, MODIFIED,
    DELETED with the known state, a stale or a bare one, and relists."""
    rv = 1
    for _ in range(steps):
        rv += 1
        name = rng.choice(names)
        current = next((o for o in s.list() if o["metadata"]["name"] == name), None)
        move = rng.random()
        if move < 0.1:  # a relist: some objects gone, some changed, some new
            items = [o for o in s.list() if rng.random() < 0.7]
            items = [make(o["metadata"]["name"], rng, rv) if rng.random() < 0.3 else o
                     for o in items]
            items += [make(n, rng, rv) for n in rng.sample(names, 3)
                      if all(o["metadata"]["name"] != n for o in items)]
            s.replace(items)
        elif move < 0.3 and current is not None:
            # A delete whose final state is not the one the store held (a tombstone
            # after a missed watch), or carries only the key.
            gone = (make(name, rng, rv) if rng.random() < 0.5 else
                    {"metadata": {"name": name}})
            gone["metadata"]["namespace"] = current["metadata"].get("namespace")
            s.apply(client.WatchEvent("DELETED", gone))
        elif move < 0.45 and current is not None:
            s.apply(client.WatchEvent("DELETED", current))
        elif move < 0.6 and current is not None:  # a heartbeat: only the version moves
            beat = {**current, "metadata": {**current["metadata"], "resourceVersion": str(rv)}}
            s.apply(client.WatchEvent("MODIFIED", beat))
        else:
            fresh = make(name, rng, rv)
            if current is not None:
                fresh["metadata"]["namespace"] = current["metadata"].get("namespace")
            s.apply(client.WatchEvent("MODIFIED" if current is not None else "ADDED", fresh))
        check()


def recomputed_since(s: store.Store, time: datetime.datetime | None) -> list[ledgerindex.Node]:
    rows = [(ledgerindex.created_at(o["metadata"].get("creationTimestamp")),
             o["metadata"]["name"], o["metadata"].get("labels") or {}) for o in s.list()]
    return sorted((r for r in rows if time is None or r[0] >= time), key=lambda r: r[:2])


def recomputed_before(s: store.Store, time: datetime.datetime | None) -> set[str]:
    out = set()
    for o in s.list():
        created = ledgerindex.created_at(o["metadata"].get("creationTimestamp"))
        if time is None or ledgerindex.UNKNOWN < created < time:
            out.add(o["metadata"]["name"])
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_nodes_by_creation_equals_a_recomputation_after_any_events(seed: int) -> None:
    rng = random.Random(seed)
    s = store.Store(kinds.NODE)
    s.seed(*(node(n, rng, 1) for n in NODES[:5]))  # some before the index, some after
    index = ledgerindex.NodesByCreation(s)

    def check() -> None:
        assert len(index) == len(s)
        for name in NODES:
            assert index.labels(name) == (ledger.labels(n) if (n := s.get(name)) else None)
        for t in TIMES:
            assert index.since(t) == recomputed_since(s, t), t
            assert index.before(t) == recomputed_before(s, t), t
        for wanted in WANTED:  # asked twice: the second answer is the kept one
            want = {o["metadata"]["name"] for o in s.list()
                    if wanted.items() <= ledger.labels(o).items()}
            assert index.matching(wanted) == want == index.matching(wanted), wanted
    check()
    churn(s, node, NODES, rng, 150, check)


WANTED = [{}, {"shape": "b200"}, {"shape": "h100"}, {"shape": "b200", "zone": "a"},
          {"zone": "b"}]


def recounted(s: store.Store) -> dict[tuple[str, str], dict[str, int]]:
    out: dict[tuple[str, str], dict[str, int]] = {}
    for o in s.list():
        for key, n in ledgerindex.counted(o):
            out.setdefault(key, {})
            out[key][n] = out[key].get(n, 0) + 1
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_bound_pods_equal_a_recount_after_any_events(seed: int) -> None:
    rng = random.Random(seed)
    s = store.Store(kinds.POD)
    names = [f"p{i}" for i in range(10)]
    s.seed(*(pod(n, rng, 1) for n in names[:4]))
    index = ledgerindex.BoundPods(s)

    def check() -> None:
        want = recounted(s)
        assert index.owners() == len(want)
        for ns in ("ns1", "ns2"):
            for owner in ("uid-a", "uid-b", "uid-c", "uid-d"):
                assert dict(index.of(ns, owner)) == want.get((ns, owner), {}), (ns, owner)
    check()
    churn(s, pod, names, rng, 150, check)


def test_a_pod_counts_once_for_an_owner_both_labels_name() -> None:
    p = {"metadata": {"name": "p", "namespace": "ns",
                      "labels": {c.PLACEMENT_LABEL: "u", c.PLACEMENT_WORKLOAD_LABEL: "u"}},
         "spec": {"nodeName": "n1"}}
    assert ledgerindex.counted(p) == [(("ns", "u"), "n1")]
    assert ledgerindex.counted({**p, "spec": {}}) == []


def test_node_times_without_a_zone_are_utc_and_unreadable_ones_come_first() -> None:
    assert ledgerindex.created_at("2026-12-05T10:00:01") == datetime.datetime(
        2026, 12, 5, 10, 0, 1, tzinfo=datetime.UTC)
    assert ledgerindex.created_at("yesterday") == ledgerindex.UNKNOWN
    assert ledgerindex.created_at(None) == ledgerindex.UNKNOWN


def request(name: str, rng: random.Random, rv: int) -> dict[str, Any]:
    conditions = [{"type": t, "status": rng.choice(["True", "False"])}
                  for t in rng.sample([c.PROVISIONED, c.FAILED, c.ACCEPTED], 2)]
    meta: dict[str, Any] = {
        "name": name, "namespace": rng.choice(["ns1", "ns2"]), "resourceVersion": str(rv),
        "labels": {c.MANAGED_LABEL: "fitgate"} if rng.random() < 0.8 else {},
        "annotations": {c.WORKLOAD_ANNOTATION: f"ns1/{rng.choice(['wl1', 'wl2', 'gone'])}"}}
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": meta, "status": {"conditions": conditions}}


@pytest.mark.parametrize("seed", SEEDS)
def test_provisioned_requests_equal_a_recomputation_after_any_events(seed: int) -> None:
    rng = random.Random(seed)
    requests = store.Store(kinds.PROVISIONING_REQUEST)
    workloads = store.Store(kinds.WORKLOAD)
    workloads.seed(*({"metadata": {"name": n, "namespace": "ns1"}} for n in ("wl1", "wl2")))
    names = [f"r{i}" for i in range(8)]
    requests.seed(*(request(n, rng, 1) for n in names[:3]))
    index = ledger.ProvisionedRequests(requests)

    def check() -> None:
        want = [key for r in requests.list()
                if provisioning.state(r)[0] == "provisioned"
                and (key := ledger.workload_of_request(r)) is not None
                and workloads.get(key[1], key[0]) is not None]
        assert sorted(ledger.waiting_for_nodes(workloads, index)) == sorted(want)
    check()
    churn(requests, request, names, rng, 150, check)


def owned_request(name: str, rng: random.Random, rv: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": rng.choice(["ns1", "ns2"]),
                            "resourceVersion": str(rv),
                            "labels": rng.choice([{}, {c.WORKLOAD_UID_LABEL: "uid-a"},
                                                  {c.WORKLOAD_UID_LABEL: "uid-b"}])}
    if (stamp := rng.choice(STAMPS)) is not None:
        meta["creationTimestamp"] = stamp
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": meta}


@pytest.mark.parametrize("seed", SEEDS)
def test_requests_by_creation_and_owner_equal_a_recomputation_after_any_events(
        seed: int) -> None:
    rng = random.Random(seed)
    s = store.Store(kinds.PROVISIONING_REQUEST)
    names = [f"r{i}" for i in range(10)]
    s.seed(*(owned_request(n, rng, 1) for n in names[:4]))
    index = ledgerindex.Requests(s)

    def key(o: dict[str, Any]) -> tuple[str, str]:
        return (o["metadata"].get("namespace") or "", o["metadata"]["name"])

    def check() -> None:
        assert len(index) == len(s)
        for t in [ledgerindex.UNKNOWN, *TIMES[1:]]:
            want = sorted((o for o in s.list() if ledgerindex.created_at(
                o["metadata"].get("creationTimestamp")) <= t),
                key=lambda o: (ledgerindex.created_at(o["metadata"].get("creationTimestamp")),
                               key(o)))
            got = index.created_until(t)
            assert [key(o) for o in got] == [key(o) for o in want], t
            assert all(a is b for a, b in zip(got, want, strict=True))
        for ns in ("ns1", "ns2"):
            for uid in ("uid-a", "uid-b", "uid-c"):
                want_owned = {key(o) for o in s.list(ns)
                              if o["metadata"].get("labels", {}).get(c.WORKLOAD_UID_LABEL)
                              == uid}
                assert {key(o) for o in index.of_owner(ns, uid)} == want_owned, (ns, uid)
    check()
    churn(s, owned_request, names, rng, 150, check)


def test_nodes_newest_and_all_labels_follow_the_store() -> None:
    s = store.Store(kinds.NODE)
    index = ledgerindex.NodesByCreation(s)
    assert index.newest() is None and dict(index.all_labels()) == {}
    s.seed({"metadata": {"name": "a", "creationTimestamp": STAMPS[3], "labels": {"x": "1"}}},
           {"metadata": {"name": "b", "creationTimestamp": STAMPS[0]}})
    assert index.newest() == ledgerindex.created_at(STAMPS[3])
    assert dict(index.all_labels()) == {"a": {"x": "1"}, "b": {}}
    s.apply(client.WatchEvent("DELETED", s.get("a") or {}))
    assert index.newest() == ledgerindex.created_at(STAMPS[0])
    assert dict(index.all_labels()) == {"b": {}}
