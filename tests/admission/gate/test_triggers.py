"""Which events requeue the gate: a change that can alter its decision does, one that
cannot (a status write, a one-slice pool republished, a heartbeat) does not; and over the
reconcile runtime, a held gang under such churn is reconciled once, not per event."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

from admission import clock
from admission.gate import predicates as gating
from admission.kube import kinds
from admission.runtime import workqueue
from tests.admission.gate.test_reconciler import World
from tests.fitcore import builders as fb
from tests.gang import builders as gb


def _changed(w: World, kind: kinds.Kind, name: str, namespace: str | None,
             edit: Callable[[dict[str, Any]], None]) -> list[str]:
    """The keys the gate queues for one edit of a stored object."""
    found = w.stores[kind].get(name, namespace) if namespace else w.stores[kind].get(name)
    assert found is not None
    obj = copy.deepcopy(found)
    edit(obj)
    w.enqueued.clear()
    w.stores[kind].seed(obj)
    return list(w.enqueued)


def _status(obj: dict[str, Any]) -> None:
    obj["metadata"]["resourceVersion"] = "99"
    obj["status"] = {"admissionChecks": [{"name": "topo-fit", "state": "Pending"}],
                     "conditions": [{"type": "QuotaReserved", "status": "False",
                                     "reason": "Pending"}]}


def _count(obj: dict[str, Any]) -> None:
    obj["spec"]["podSets"][0]["count"] += 1


def _admitted(obj: dict[str, Any]) -> None:
    ps = obj["spec"]["podSets"][0]
    obj["status"] = {"admission": {"podSetAssignments": [{"name": ps["name"], "count": 1}]}}


def _labels(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("labels", {})["team"] = "b"


def _owner(obj: dict[str, Any]) -> None:
    obj["metadata"]["ownerReferences"] = [{**obj["metadata"]["ownerReferences"][0],
                                           "name": "other"}]


@pytest.mark.parametrize(("edit", "requeued"), [
    (_status, False), (_count, True), (_admitted, True), (_labels, True), (_owner, True),
], ids=["status-write", "pod-count", "partial-admission", "labels", "owner"])
def test_a_gated_workloads_event_requeues_only_when_the_gate_reads_a_change(
        edit: Callable[[dict[str, Any]], None], requeued: bool) -> None:
    w = World()
    ns, name = workqueue.split(w.key)
    assert _changed(w, kinds.WORKLOAD, name, ns, edit) == ([w.key] if requeued else [])


def _republish(obj: dict[str, Any]) -> None:
    obj["spec"]["pool"]["generation"] += 1


def _device_gone(obj: dict[str, Any]) -> None:
    _republish(obj)
    obj["spec"]["devices"] = obj["spec"]["devices"][:-1]


def _split_pool(obj: dict[str, Any]) -> None:
    _republish(obj)
    obj["spec"]["pool"]["resourceSliceCount"] = 2


def _heartbeat(obj: dict[str, Any]) -> None:
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]


def _taint(obj: dict[str, Any]) -> None:
    obj["spec"] = {**(obj.get("spec") or {}), "taints": [
        {"key": "gpu", "value": "broken", "effect": "NoSchedule"}]}


@pytest.mark.parametrize(("kind", "name", "edit", "requeued"), [
    (kinds.RESOURCE_SLICE, "gpu-0-gpu", _republish, False),
    (kinds.RESOURCE_SLICE, "gpu-0-gpu", _device_gone, True),
    (kinds.RESOURCE_SLICE, "gpu-0-gpu", _split_pool, True),
    (kinds.NODE, "gpu-0", _heartbeat, False),
    (kinds.NODE, "gpu-0", _taint, True),
], ids=["slice-republished", "slice-device-gone", "slice-pool-now-two", "node-heartbeat",
        "node-tainted"])
async def test_an_inventory_event_requeues_held_gangs_only_when_it_can_change_a_verdict(
        kind: kinds.Kind, name: str, edit: Callable[[dict[str, Any]], None],
        requeued: bool) -> None:
    w = World(template_gpus=6)  # no node has 6 GPUs on one root: held
    await w.reconcile()
    assert w.job_annotations()[gating.GATED_BY] == gating.GATE and w.key in w.gate.held
    assert _changed(w, kind, name, None, edit) == ([w.key] if requeued else [])


def test_a_multi_slice_pools_generation_change_still_counts() -> None:
    """Republishing one slice of a pool of two leaves the pool incomplete for a while,
    which can change what fits."""
    w = World()
    w.gate.held.add(w.key)
    two = fb.rslice("extra-0", gb.gpu_devices(4, 1), node="gpu-0", pool="split", count=2)
    w.stores[kinds.RESOURCE_SLICE].seed(two)
    assert _changed(w, kinds.RESOURCE_SLICE, "extra-0", None, _republish) == [w.key]


async def test_over_the_runtime_a_held_gang_is_not_reconciled_per_status_write_or_republish(
        ) -> None:
    """The gate's reconciles counted over the reconcile runtime: a held gang, then 20
    status writes to its Workload and 20 republished slices: no reconcile; then a shape
    that fits: one, which lifts the gate."""
    w = World(template_gpus=6)
    runtime = workqueue.Runtime(lambda k: w.stores[k], clock=clock.SystemClock())
    reconciled: list[str] = []
    reconcile = w.gate.reconcile

    async def counted(key: str) -> float | None:
        reconciled.append(key)
        return await reconcile(key)

    w.gate.reconcile = counted  # type: ignore[method-assign]
    runtime.register(w.gate)
    runtime.start(leader_only=True)
    try:
        await _settle(lambda: bool(reconciled) and w.key in w.gate.held)
        assert reconciled == [w.key]
        ns, name = workqueue.split(w.key)
        for i in range(20):
            _changed(w, kinds.WORKLOAD, name, ns, _status)
            _changed(w, kinds.RESOURCE_SLICE, f"gpu-{i % 2}-gpu", None, _republish)
        await asyncio.sleep(0.05)
        assert reconciled == [w.key]
        w.stores[kinds.NODE_SHAPE].seed(gb.shape("one-root", gpus=8, roots=1))
        await _settle(lambda: gating.GATED_BY not in w.job_annotations())
        assert reconciled == [w.key, w.key]
    finally:
        await runtime.stop()


async def _settle(done: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)

