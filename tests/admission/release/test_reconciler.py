"""Pod release: the webhook's gate, and pods released in fitcore's order per node."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admission import constants as c
from admission.kube import fake, kinds, store
from admission.release import reconciler as release

UID = "wl-uid-1"


def pod(name: str, pod_set: str = "workers", *, gated: bool = True, node: str | None = None,
        slot: str | None = None, selector: str | None = None, index: int | None = None,
        created: str = "2026-01-01T00:00:00Z", phase: str = "Pending") -> dict[str, Any]:
    labels = {c.PLACEMENT_LABEL: UID, c.KUEUE_POD_SET_LABEL: pod_set}
    if index is not None:
        labels[c.COMPLETION_INDEX_LABEL] = str(index)
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels,
                            "creationTimestamp": created}
    if slot:
        meta["annotations"] = {c.SLOT_ANNOTATION: slot}
    spec: dict[str, Any] = {"containers": [{"name": "main"}]}
    if gated:
        spec["schedulingGates"] = [{"name": "other.io/gate"}, {"name": c.SCHEDULING_GATE}]
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = {c.HOSTNAME_LABEL: selector}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase}}


# launcher first on n1, then two workers on n1, then two workers on n2 (fitcore's order)
PLACEMENTS = [{"podSet": "launcher", "index": 0, "node": "n1"},
              {"podSet": "workers", "index": 0, "node": "n1"},
              {"podSet": "workers", "index": 1, "node": "n1"},
              {"podSet": "workers", "index": 2, "node": "n2"},
              {"podSet": "workers", "index": 3, "node": "n2"}]
SLOTS = release.slots_from(PLACEMENTS)


def by_pod(actions: list[release.Action]) -> dict[str, release.Action]:
    return {a.pod: a for a in actions}


# ------------------------------------------------------------------ gate_patch


@pytest.mark.parametrize("obj,want", [
    ({"metadata": {"labels": {c.PLACEMENT_LABEL: UID}}, "spec": {}},
     [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": c.SCHEDULING_GATE}]}]),
    ({"metadata": {"labels": {c.PLACEMENT_WORKLOAD_LABEL: UID}},
      "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}},
     [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": c.SCHEDULING_GATE}}]),
    ({"metadata": {"labels": {c.PLACEMENT_LABEL: UID}},
      "spec": {"schedulingGates": [{"name": c.SCHEDULING_GATE}]}}, []),
    ({"metadata": {"labels": {"app": "x"}}, "spec": {}}, []),
    ({"metadata": {"labels": {c.PLACEMENT_LABEL: UID}}, "spec": {"nodeName": "n1"}}, []),
], ids=["first-gate", "another-gate-there", "already-gated", "not-ours", "already-bound"])
def test_gate_patch(obj: dict[str, Any], want: list[dict[str, Any]]) -> None:
    assert release.gate_patch(obj) == want
    if want:
        patched = fake.json_patch(obj, want)
        assert {"name": c.SCHEDULING_GATE} in patched["spec"]["schedulingGates"]


# --------------------------------------------------------------------- decide


def test_first_pod_per_node_is_released_and_the_rest_pinned_and_held() -> None:
    pods = [pod("l", "launcher"),
            *(pod(f"w{i}", created=f"2026-01-01T00:00:0{i}Z") for i in range(4))]
    # the launcher pod comes last in creation order: order on a node is fitcore's anyway
    pods[0]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:09Z"
    acts = by_pod(release.decide(SLOTS, pods))
    assert {n: (a.slot.name if a.slot else None, a.release) for n, a in acts.items()} == {
        "l": ("launcher/0", True), "w0": ("workers/0", False), "w1": ("workers/1", False),
        "w2": ("workers/2", True), "w3": ("workers/3", False)}
    patched = fake.json_patch(pods[0], acts["l"].patch)
    assert patched["spec"]["nodeSelector"] == {c.HOSTNAME_LABEL: "n1"}
    assert patched["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]
    assert patched["metadata"]["annotations"] == {c.SLOT_ANNOTATION: "launcher/0"}
    held = fake.json_patch(pods[2], acts["w1"].patch)
    assert held["spec"]["nodeSelector"] == {c.HOSTNAME_LABEL: "n1"}
    assert {"name": c.SCHEDULING_GATE} in held["spec"]["schedulingGates"]


def test_pins_name_the_nodes_hostname_label_where_it_differs_from_the_name() -> None:
    # Karpenter's kwok provider labels a node kubernetes.io/hostname=<its NodeClaim>; a
    # pin by node name would match no node.
    pods = [pod("l", "launcher"), *(pod(f"w{i}") for i in range(4))]
    hostnames = {"n1": "claim-1"}
    acts = by_pod(release.decide(SLOTS, pods, hostnames.get))
    assert fake.json_patch(pods[0], acts["l"].patch)["spec"]["nodeSelector"] == {
        c.HOSTNAME_LABEL: "claim-1"}
    assert fake.json_patch(pods[3], acts["w2"].patch)["spec"]["nodeSelector"] == {
        c.HOSTNAME_LABEL: "n2"}  # no label known: the name


def test_next_pod_on_a_node_is_released_once_the_previous_is_bound() -> None:
    pods = [pod("l", "launcher", gated=False, node="n1", slot="launcher/0", selector="n1"),
            pod("w0", slot="workers/0", selector="n1"),
            pod("w1", slot="workers/1", selector="n1")]
    acts = by_pod(release.decide(SLOTS, pods))
    assert set(acts) == {"w0"}
    assert acts["w0"].release
    assert all(op["op"] in ("test", "remove") for op in acts["w0"].patch)  # already pinned
    # launcher bound but w0 not yet: w1 waits
    pods[1] = pod("w0", gated=False, slot="workers/0", selector="n1")
    assert release.decide(SLOTS, pods) == []
    pods[1] = pod("w0", gated=False, node="n1", slot="workers/0", selector="n1")
    assert [a.pod for a in release.decide(SLOTS, pods) if a.release] == ["w1"]


def test_completion_index_picks_the_slot_of_that_index() -> None:
    pods = [pod("a", index=3, created="2026-01-01T00:00:01Z"),
            pod("b", index=2, created="2026-01-01T00:00:02Z")]
    acts = by_pod(release.decide(SLOTS, pods))
    assert acts["a"].slot is not None and acts["a"].slot.name == "workers/3"
    assert acts["b"].slot is not None and acts["b"].slot.name == "workers/2"
    assert acts["b"].release and not acts["a"].release


def test_a_replacement_takes_the_slot_of_a_failed_pod() -> None:
    pods = [pod("l", "launcher", gated=False, node="n1", slot="launcher/0", selector="n1"),
            pod("w0", gated=False, node="n1", slot="workers/0", selector="n1",
                phase="Failed"),
            pod("w0b", created="2026-01-01T00:01:00Z")]
    acts = by_pod(release.decide(SLOTS, pods))
    assert acts["w0b"].slot is not None and acts["w0b"].slot.name == "workers/0"
    assert acts["w0b"].release  # the launcher before it is bound, the failed pod is done


def test_pods_beyond_the_slots_and_lost_placements_fail_open() -> None:
    pods = [pod(f"w{i}") for i in range(5)]
    acts = release.decide(SLOTS, pods)
    extra = [a for a in acts if a.slot is None]
    assert len(extra) == 1 and extra[0].release
    lost = release.decide(None, pods)
    assert all(a.release and a.slot is None for a in lost) and len(lost) == 5


# ----------------------------------------------------------------- controller


async def test_controller_releases_a_node_in_fitcores_order_as_pods_bind() -> None:
    api = fake.FakeClient()
    pods = store.Store(kinds.POD)
    api.seed(kinds.CONFIG_MAP, {"metadata": {"name": c.PLACEMENTS_PREFIX + UID,
                                             "namespace": "default"},
                                "data": {c.PLACEMENTS_KEY: json.dumps(PLACEMENTS)}})
    for p in [pod("l", "launcher", created="2026-01-01T00:00:05Z"),
              *(pod(f"w{i}", created=f"2026-01-01T00:00:0{i}Z") for i in range(4))]:
        api.seed(kinds.POD, p)
    ctl = release.ReleaseController(api, pods)
    order: list[str] = []

    def ungated() -> set[str]:
        return {p["metadata"]["name"] for p in api.objects(kinds.POD)
                if {"name": c.SCHEDULING_GATE} not in p["spec"].get("schedulingGates", [])}

    for _ in range(6):  # the scheduler binds whatever is released, one round at a time
        pods.replace(api.objects(kinds.POD))
        assert release.key_of(pods.list()[0]) == ("default", UID)
        await ctl.reconcile(f"default/{UID}")
        for p in api.objects(kinds.POD):
            name = p["metadata"]["name"]
            if name in ungated() and not p["spec"].get("nodeName"):
                p["spec"]["nodeName"] = p["spec"]["nodeSelector"][c.HOSTNAME_LABEL]
                api.seed(kinds.POD, p)
                order.append(name)
    on_n1 = [n for n in order if n in ("l", "w0", "w1")]
    assert on_n1 == ["l", "w0", "w1"]
    assert [n for n in order if n in ("w2", "w3")] == ["w2", "w3"]
    bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.objects(kinds.POD)}
    assert bound == {"l": "n1", "w0": "n1", "w1": "n1", "w2": "n2", "w3": "n2"}


async def test_controller_never_gives_one_slot_to_two_pods_while_its_store_lags() -> None:
    """Found by the e2e scenario 1: the Job's pods reach the store one by one and the store
    lags the controller's own patches; a slot given to a pod must stay that pod's even when
    the next reconcile still sees the pod without it."""
    api = fake.FakeClient()
    pods = store.Store(kinds.POD)
    placements = [{"podSet": "workers", "index": i, "node": f"n{i}"} for i in range(4)]
    api.seed(kinds.CONFIG_MAP, {"metadata": {"name": c.PLACEMENTS_PREFIX + UID,
                                             "namespace": "default"},
                                "data": {c.PLACEMENTS_KEY: json.dumps(placements)}})
    created = [api.seed(kinds.POD, pod(f"w{i}")) for i in range(4)]
    ctl = release.ReleaseController(api, pods)
    pods.replace([created[1], created[3]])  # two pods have arrived
    await ctl.reconcile(f"default/{UID}")
    pods.replace(created)  # all four, but as they were before the controller's patches
    await ctl.reconcile(f"default/{UID}")
    nodes = [p["spec"]["nodeSelector"][c.HOSTNAME_LABEL] for p in api.objects(kinds.POD)]
    assert sorted(nodes) == ["n0", "n1", "n2", "n3"], nodes
    pods.replace(api.objects(kinds.POD))  # the store caught up: nothing left to write
    await ctl.reconcile(f"default/{UID}")
    assert not ctl._written
