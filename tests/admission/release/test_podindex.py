"""The release controller's pods per gang (`podindex.PodsByWorkload`) equal the
namespace's pods filtered by the gang's uid after any sequence of store events: adds,
label changes that move a pod to another gang or out of every gang, heartbeats, deletes
with the known, a stale or only the key, and relists."""

from __future__ import annotations

import random

import pytest

from admission.kube import kinds, store
from admission.release import podindex
from admission.release import reconciler as release
from tests.admission.check.test_ledgerindex import churn, pod

SEEDS = range(12)
OWNERS = ("uid-a", "uid-b", "uid-c", "uid-d")


def filtered(s: store.Store, namespace: str, uid: str) -> dict[str, object]:
    return {p["metadata"]["name"]: p for p in s.list(namespace)
            if release.workload_uid(p) == uid}


@pytest.mark.parametrize("seed", SEEDS)
def test_pods_by_workload_equal_the_filtered_store_after_any_events(seed: int) -> None:
    rng = random.Random(seed)
    s = store.Store(kinds.POD)
    names = [f"p{i}" for i in range(10)]
    s.seed(*(pod(n, rng, 1) for n in names[:4]))  # some before the index, some after
    index = podindex.PodsByWorkload(s, release.workload_uid)

    def check() -> None:
        gangs = 0
        for ns in ("ns1", "ns2"):
            for uid in OWNERS:
                got = index.of(ns, uid)
                want = filtered(s, ns, uid)
                assert {p["metadata"]["name"]: p for p in got} == want, (ns, uid)
                assert len(got) == len(want)  # each pod once
                # The very objects the store holds (what `_current` compares with).
                assert all(p is want[p["metadata"]["name"]] for p in got)
                gangs += bool(want)
        assert index.gangs() == gangs
    check()
    churn(s, pod, names, rng, 150, check)


def test_a_pod_whose_label_changes_moves_to_its_new_gang() -> None:
    s = store.Store(kinds.POD)
    index = podindex.PodsByWorkload(s, release.workload_uid)
    p = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1",
                      "labels": {release.c.PLACEMENT_LABEL: "u1"}}, "spec": {}}
    s.seed(p)
    assert [x["metadata"]["name"] for x in index.of("ns", "u1")] == ["p"]
    s.seed({**p, "metadata": {**p["metadata"], "labels": {release.c.PLACEMENT_LABEL: "u2"}}})
    assert index.of("ns", "u1") == []
    assert [x["metadata"]["name"] for x in index.of("ns", "u2")] == ["p"]
    s.seed({**p, "metadata": {**p["metadata"], "labels": {}}})
    assert index.of("ns", "u2") == [] and index.gangs() == 0
