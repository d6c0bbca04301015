"""The AdmissionCheck reconciler: Active for fitgate's checks, BadParametersRef with a
readable message otherwise, written by server-side apply only when it changes."""

from __future__ import annotations

from typing import Any

import pytest

from admission import clock
from admission.check import admissioncheck
from admission.kube import fake, kinds, store
from admission.runtime import workqueue


def _check(name: str, params: Any = None, controller_name: str = "fitgate.io/topology-fit"
           ) -> dict[str, Any]:
    spec: dict[str, Any] = {"controllerName": controller_name}
    if params is not None:
        spec["parameters"] = params
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
            "metadata": {"name": name}, "spec": spec}


POLICY = {"apiGroup": "fitgate.io", "kind": "FitPolicy", "name": "gpu-teams"}


class World:
    def __init__(self) -> None:
        self.api = fake.FakeClient()
        self.stores = {k.kind: store.Store(k) for k in (kinds.ADMISSION_CHECK,
                                                         kinds.FIT_POLICY)}
        self.rec = admissioncheck.AdmissionCheckReconciler(
            self.api, lambda k: self.stores[k.kind], clock=clock.FakeClock())

    def put(self, kind: kinds.Kind, obj: dict[str, Any]) -> None:
        made = self.api.seed(kind, obj)
        self.stores[kind.kind].seed(made)

    def sync(self, name: str) -> None:
        got = self.api.find(kinds.ADMISSION_CHECK, name)
        assert got is not None
        self.stores[kinds.ADMISSION_CHECK.kind].seed(got)

    def active(self, name: str) -> dict[str, Any]:
        got = self.api.find(kinds.ADMISSION_CHECK, name)
        assert got is not None
        (cond,) = [c for c in got["status"]["conditions"] if c["type"] == "Active"]
        return cond


@pytest.mark.parametrize(("params", "status", "reason", "message"), [
    (None, "True", "Active", "fitgate plans"),
    (POLICY, "False", "BadParametersRef", "FitPolicy 'gpu-teams' named by spec.parameters "
                                          "does not exist"),
    ({"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "x"},
     "False", "BadParametersRef", "must reference a fitgate.io FitPolicy"),
    ({"apiGroup": "fitgate.io", "kind": "FitPolicy", "name": ""}, "False",
     "BadParametersRef", "spec.parameters.name is empty"),
], ids=["no-parameters", "missing-policy", "wrong-kind", "empty-name"])
async def test_active_condition(params: Any, status: str, reason: str, message: str) -> None:
    w = World()
    w.put(kinds.ADMISSION_CHECK, _check("fit", params))
    assert await w.rec.reconcile("fit") is None
    cond = w.active("fit")
    assert (cond["status"], cond["reason"]) == (status, reason)
    assert message in cond["message"]
    assert cond["observedGeneration"] == 1
    assert cond["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    (call,) = w.api.verbs("patch", kinds.ADMISSION_CHECK)
    assert call.subresource == "status"
    assert call.body["fieldManager"] == "fitgate"


async def test_writes_only_when_changed_and_a_new_policy_activates_the_check() -> None:
    w = World()
    w.put(kinds.ADMISSION_CHECK, _check("fit", POLICY))
    await w.rec.reconcile("fit")
    w.sync("fit")
    await w.rec.reconcile("fit")
    assert len(w.api.verbs("patch", kinds.ADMISSION_CHECK)) == 1  # nothing changed
    policy = {"apiVersion": "fitgate.io/v1alpha1", "kind": "FitPolicy",
              "metadata": {"name": "gpu-teams"}, "spec": {}}
    w.put(kinds.FIT_POLICY, policy)
    keys = list(w.rec.keys(kinds.FIT_POLICY, fake.client.WatchEvent("ADDED", policy), None))
    assert keys == ["fit"]
    await w.rec.reconcile("fit")
    assert w.active("fit")["status"] == "True"
    assert len(w.api.verbs("patch", kinds.ADMISSION_CHECK)) == 2


async def test_checks_of_other_controllers_are_left_alone() -> None:
    w = World()
    other = _check("prov", controller_name="kueue.x-k8s.io/provisioning-request")
    w.put(kinds.ADMISSION_CHECK, other)
    ev = fake.client.WatchEvent("ADDED", other)
    assert list(w.rec.keys(kinds.ADMISSION_CHECK, ev, None)) == []
    await w.rec.reconcile("prov")
    assert w.api.verbs("patch") == []


async def test_runs_in_the_runtime_from_store_events() -> None:
    w = World()
    clk = clock.FakeClock()
    rt = workqueue.Runtime(lambda k: w.stores[k.kind], clock=clk)
    rt.register(w.rec)
    rt.start(leader_only=True)
    w.put(kinds.ADMISSION_CHECK, _check("fit"))
    await clk.advance(0)
    assert w.active("fit")["reason"] == "Active"
    await rt.stop()
