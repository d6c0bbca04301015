"""A small world for check tests: the FakeClient, stores refreshed from it (as watches
would), a fake clock, and the process's `admission.engine.inventory.ClusterInventory`, kept
current by the stores' events."""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from admission import constants as c
from admission.check import inputs
from admission.check import workload as wlr
from admission.engine import inventory
from admission.kube import fake, kinds, store
from fitcore import gang, plan
from tests.gang import builders as gb

EPOCH = datetime.datetime(2026, 1, 1, 0, 0, 30, tzinfo=datetime.UTC)
OLD = "2025-12-01T00:00:00Z"  # nodes that were there before any request
NEW = "2026-01-01T00:05:00Z"  # nodes the autoscaler added (requests are created at 00:00)
SHAPE_LABEL = "node.example.com/shape"


class Recorded:
    """The process's `inventory.ClusterInventory` over the world's stores, recording
    which decisions were asked."""

    def __init__(self, stores: dict[kinds.Kind, store.Store]) -> None:
        self.inner = inventory.ClusterInventory(lambda k: stores[k])
        self.calls: list[str] = []

    async def plan_async(self, gang_: gang.Gang, *, shapes: Iterable[str] | None = None,
                         node_filter: Any = None, held: Collection[str] = ()
                         ) -> plan.PlanResult:
        self.calls.append("plan")
        return await self.inner.plan_async(gang_, shapes=shapes, node_filter=node_filter,
                                           held=held)

    async def fit_async(self, gang_: gang.Gang, *, node_filter: Any = None,
                        held: Collection[str] = ()) -> plan.PlanResult:
        self.calls.append("fit")
        return await self.inner.fit_async(gang_, node_filter=node_filter, held=held)

    async def verify_async(self, gang_: gang.Gang, plan_: plan.Plan, *,
                           node_filter: Any = None, held: Collection[str] = ()
                           ) -> plan.VerifyResult:
        self.calls.append("verify")
        return await self.inner.verify_async(gang_, plan_, node_filter=node_filter,
                                             held=held)


    def assume(self, owner: str, gang_: gang.Gang, placements: Sequence[gang.Placement]
               ) -> None:
        self.inner.assume(owner, gang_, placements)

    def forget(self, owner: str, nodes: Collection[str] | None = None) -> None:
        self.inner.forget(owner, nodes)


class Clock:
    """Wall time the test sets (`world.now = ...`)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def now(self) -> datetime.datetime:
        return self.world.now

    def monotonic(self) -> float:
        return (self.world.now - EPOCH).total_seconds()

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("the reconciler never sleeps: it returns a requeue")


class World:
    def __init__(self) -> None:
        self.api = fake.FakeClient()
        self.stores = {k: store.Store(k) for k in kinds.ALL}
        self.now = EPOCH
        self.inventory = Recorded(self.stores)
        self.clock = Clock(self)

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)

    def seed(self, *objs: dict[str, Any]) -> None:
        for o in objs:
            self.api.seed(kinds.BY_NAME[o["kind"]], o)
        self.refresh()

    def refresh(self) -> None:
        for k in kinds.ALL:
            self.stores[k].replace(self.api.objects(k))

    def restart(self) -> None:
        """A new process (a new leader): its own inventory, fed from the stores, with
        nothing an earlier reconciler assumed."""
        self.inventory.inner.close()
        self.inventory = Recorded(self.stores)

    def reconciler(self, **settings: Any) -> wlr.WorkloadReconciler:
        return wlr.WorkloadReconciler(self.api, inputs.Stores.of(self.stores), self.inventory,
                                      clock=self.clock, settings=inputs.Settings(**settings))

    async def reconcile(self, r: wlr.WorkloadReconciler | None = None, name: str = "train",
                        namespace: str = "default") -> float | None:
        self.refresh()
        wait = await (r or self.reconciler()).reconcile(f"{namespace}/{name}")
        self.refresh()
        return wait

    # ---- reads

    def workload(self, name: str = "train") -> dict[str, Any]:
        wl = self.api.find(kinds.WORKLOAD, name, "default")
        assert wl is not None
        return wl

    def entry(self, name: str = "train", check: str = "fitgate") -> dict[str, Any]:
        for e in self.workload(name)["status"]["admissionChecks"]:
            if e["name"] == check:
                return dict(e)
        raise AssertionError(f"no entry {check}")

    def requests(self) -> list[dict[str, Any]]:
        return self.api.objects(kinds.PROVISIONING_REQUEST)

    def request_names(self) -> list[str]:
        return sorted(r["metadata"]["name"] for r in self.requests())

    def status_writes(self) -> int:
        return len([x for x in self.api.verbs("patch", kinds.WORKLOAD)
                    if x.subresource == "status"])

    # ---- changes behind fitgate's back

    def set_request_condition(self, name: str, kind: str, status: str = "True",
                              message: str = "", at: str = "2026-01-01T00:01:00Z") -> None:
        pr = self.api.find(kinds.PROVISIONING_REQUEST, name, "default")
        assert pr is not None
        conds = [x for x in pr.get("status", {}).get("conditions", []) if x["type"] != kind]
        conds.append({"type": kind, "status": status, "reason": kind, "message": message,
                      "lastTransitionTime": at})
        pr.setdefault("status", {})["conditions"] = conds
        self.seed(pr)

    def set_workload(self, name: str = "train", **conditions: str) -> None:
        wl = self.workload(name)
        conds = [x for x in wl["status"].get("conditions", []) if x["type"] not in conditions]
        conds += [{"type": k, "status": v, "reason": k, "message": "",
                   "lastTransitionTime": "2026-01-01T00:02:00Z"}
                  for k, v in conditions.items()]
        wl["status"]["conditions"] = conds
        self.seed(wl)

    def set_entry(self, name: str = "train", check: str = "fitgate", **fields: Any) -> None:
        wl = self.workload(name)
        for e in wl["status"]["admissionChecks"]:
            if e["name"] == check:
                e.update(fields)
        self.seed(wl)


# ------------------------------------------------------------------- builders


def admission_check(name: str = "fitgate", controller: str = c.CONTROLLER_NAME
                    ) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
            "metadata": {"name": name}, "spec": {"controllerName": controller},
            "status": {"conditions": [{"type": "Active", "status": "True"}]}}


def flavor(name: str = "default", node_labels: dict[str, str] | None = None,
           tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": name}, "spec": spec}


def workers(count: int = 2, **kw: Any) -> dict[str, Any]:
    """A pod set of `count` workers, each 4 GPUs and a NIC on one PCIe root."""
    return gb.pod_set("workers", count, templates=("gpus",), **kw)


def admitted(*pod_sets: dict[str, Any], name: str = "train", checks: Sequence[str] = ("fitgate",),
             state: str = "Pending", flavors: dict[str, str] | None = None,
             counts: dict[str, int] | None = None, retry_count: int | None = None,
             reserved: bool = True) -> dict[str, Any]:
    """A Workload with quota reserved and our check `state`."""
    wl = gb.workload(*(pod_sets or (workers(),)), name=name)
    status: dict[str, Any] = {"conditions": [], "admissionChecks": []}
    for check in checks:
        entry: dict[str, Any] = {"name": check, "state": state, "message": "",
                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
        if retry_count is not None:
            entry["retryCount"] = retry_count
        status["admissionChecks"].append(entry)
    if reserved:
        status["conditions"].append({"type": "QuotaReserved", "status": "True",
                                     "reason": "QuotaReserved", "message": "",
                                     "lastTransitionTime": "2026-01-01T00:00:00Z"})
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": ps["name"], "flavors": dict(flavors or {"cpu": "default"}),
             "count": (counts or {}).get(ps["name"], ps["count"])}
            for ps in wl["spec"]["podSets"]]}
    wl["status"] = status
    return wl


def node(name: str, *, created: str = OLD, ready: bool = True, shape: str | None = None,
         **kw: Any) -> list[dict[str, Any]]:
    """A GPU node (8 GPUs on 2 PCIe roots, a NIC per root) and its slices."""
    labels = {SHAPE_LABEL: shape} if shape else {}
    objs = gb.gpu_node(name, **kw, **labels)
    objs[0]["metadata"]["creationTimestamp"] = created
    objs[0]["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return objs


def cpu_node(name: str = "cpu-1") -> dict[str, Any]:
    n = gb.node(name)
    n["metadata"]["creationTimestamp"] = OLD
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return n


def shape(name: str = "h100", **kw: Any) -> dict[str, Any]:
    out = gb.shape(name, rack=False, **kw)
    out["spec"]["nodeLabels"] = {SHAPE_LABEL: name}
    return out


def base() -> list[dict[str, Any]]:
    """Device classes, the claim template, our AdmissionCheck, a flavor, a CPU node."""
    return [*gb.classes(), gb.template("gpus"), admission_check(), flavor(), cpu_node()]
