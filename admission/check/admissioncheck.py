"""The AdmissionCheck reconciler: keeps `Active` on fitgate's checks.

Kueue treats an AdmissionCheck as usable only when its `Active` condition is True; a
ClusterQueue naming an inactive check is itself inactive. For every AdmissionCheck with
`spec.controllerName: fitgate.io/topology-fit` this controller sets:

- `Active=True`, reason `Active`, when `spec.parameters` is absent or references a
  FitPolicy (`apiGroup: fitgate.io, kind: FitPolicy`) that exists;
- `Active=False`, reason `BadParametersRef`, with a message saying what is wrong, when it
  references another kind or a FitPolicy that does not exist.

Pipeline: fetch from the cache → skip what is not ours → compute the condition → write
only if it differs (status, reason, message, observedGeneration), by server-side apply to
the status subresource as field manager `fitgate`, which owns only this condition.
FitPolicy events requeue every fitgate check, so creating a missing policy activates the
checks that named it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from admission import clock as clock_
from admission import context
from admission.kube import client, kinds, store
from admission.runtime import workqueue

CONTROLLER_NAME = "fitgate.io/topology-fit"
FIELD_MANAGER = "fitgate"
POLICY_GROUP = kinds.FIT_POLICY.group
POLICY_KIND = kinds.FIT_POLICY.kind

log = structlog.get_logger("fitgate.admissioncheck")


def ours(check: Mapping[str, Any] | None) -> bool:
    return bool(check) and (check or {}).get("spec", {}).get("controllerName") == \
        CONTROLLER_NAME


def parameters_problem(check: Mapping[str, Any], policies: store.Store) -> str | None:
    """Why the check's parameters are not valid, or None when they are."""
    params = (check.get("spec") or {}).get("parameters")
    if not params:
        return None
    if not isinstance(params, Mapping):
        return "spec.parameters must be an object with apiGroup, kind and name"
    group, kind, name = params.get("apiGroup"), params.get("kind"), params.get("name")
    if group != POLICY_GROUP or kind != POLICY_KIND:
        return (f"spec.parameters must reference a {POLICY_GROUP} {POLICY_KIND}, got "
                f"apiGroup {group!r} kind {kind!r}")
    if not name:
        return "spec.parameters.name is empty"
    if policies.get(str(name)) is None:
        return f"{POLICY_KIND} {name!r} named by spec.parameters does not exist"
    return None


def desired(check: Mapping[str, Any], policies: store.Store) -> dict[str, Any]:
    """The Active condition the check should carry (without lastTransitionTime)."""
    problem = parameters_problem(check, policies)
    generation = (check.get("metadata") or {}).get("generation")
    cond: dict[str, Any] = {"type": "Active"}
    if problem is None:
        cond.update(status="True", reason="Active",
                    message="fitgate plans and verifies topology fit for this check")
    else:
        cond.update(status="False", reason="BadParametersRef", message=problem)
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def _current(check: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in (check.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Active":
            return dict(c)
    return None


class AdmissionCheckReconciler:
    name = "admissioncheck"
    leader_only = True
    watches = (kinds.ADMISSION_CHECK, kinds.FIT_POLICY)

    def __init__(self, api: client.Client, store_of: workqueue.StoreOf, *,
                 clock: clock_.Clock | None = None) -> None:
        self.api = api
        self.checks = store_of(kinds.ADMISSION_CHECK)
        self.policies = store_of(kinds.FIT_POLICY)
        self.clock = clock or clock_.SystemClock()

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        if kind == kinds.ADMISSION_CHECK:
            return [workqueue.key_of(event.object)] if ours(event.object) else []
        return [workqueue.key_of(c) for c in self.checks.list() if ours(c)]

    async def reconcile(self, key: str) -> float | None:
        _, name = workqueue.split(key)
        check = self.checks.get(name)
        if check is None or not ours(check):
            return None
        want = desired(check, self.policies)
        have = _current(check)
        if have is not None and all(have.get(k) == v for k, v in want.items()):
            return None
        same_status = have is not None and have.get("status") == want["status"]
        want["lastTransitionTime"] = (have or {}).get("lastTransitionTime") if same_status \
            else self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")  # metav1.Time
        await self.api.apply(kinds.ADMISSION_CHECK,
                             {"metadata": {"name": name}, "status": {"conditions": [want]}},
                             field_manager=FIELD_MANAGER, subresource="status", force=True)
        log.info("admissioncheck.active", check=name, status=want["status"],
                 reason=want["reason"], message=want["message"])
        return None


def component(ctx: context.Context) -> context.Component:
    """For `admission.app.components`: the AdmissionCheck reconciler (leader only)."""
    return context.Component(controllers=[
        AdmissionCheckReconciler(ctx.api, ctx.informers.store, clock=ctx.clock)])
