"""The ProvisioningRequest backend of the Workload reconciler (`admission.backends.Backend`).

A thin adapter over the reconciler's own ProvisioningRequest steps
(`admission.check.capacity`: `sync_new_request`, `sync_request`, `delete_request`,
`cleanup_requests`), so the reconciler drives both backends the same way; what it does is
unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import fitcore
from admission import constants as c
from admission.check import backends, capacity, provisioning
from admission.kube import client, store

if TYPE_CHECKING:
    from admission.check import workload


class ProvisioningRequestBackend:
    name = backends.PROVISIONING_REQUEST

    def __init__(self, reconciler: workload.WorkloadReconciler) -> None:
        self.r = reconciler
        self._objects = WorkloadObjects(reconciler.stores.provisioning_requests,
                                        reconciler.stores.pod_templates)

    def held(self, wl: client.Obj, check: str) -> list[client.Obj]:
        return capacity.requests_of(self.r, wl, check)

    def attempt_of(self, obj: Mapping[str, Any]) -> int:
        raw = ((obj.get("metadata") or {}).get("labels") or {}).get(c.ATTEMPT_LABEL, "0")
        return int(raw) if str(raw).isdigit() else 0

    async def start(self, wl: client.Obj, entry: Mapping[str, Any], wg: Any, attempt: int,
                    index: int, chosen: fitcore.Plan, alternatives: Sequence[fitcore.Plan],
                    why: Sequence[str] = (), previous: str = "") -> float | None:
        return await capacity.sync_new_request(self.r, wl, entry, wg, attempt, index, chosen,
                                             list(alternatives), why, previous)

    async def follow(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int,
                     objs: Sequence[client.Obj]) -> float | None:
        keep = sorted(objs, key=provisioning.plan_index)
        for older in keep[:-1]:
            await capacity.delete_request(self.r, older, "superseded by the next plan")
        return await capacity.sync_request(self.r, wl, entry, attempt, keep[-1])

    async def release(self, obj: Mapping[str, Any], why: str) -> None:
        await capacity.delete_request(self.r, obj, why)

    async def cleanup(self, namespace: str, name: str, keep_uid: str | None,
                      uid: str | None = None) -> None:
        await capacity.cleanup_requests(self.r, namespace, name, keep_uid, uid,
                                        self._objects.requests(namespace, name, uid),
                                        self._objects.templates(namespace, name))

    async def admitted(self, wl: client.Obj, check: str) -> float | None:
        return None  # the admitted gang's pods consume the request; nothing more to do


class WorkloadObjects:
    """fitgate's ProvisioningRequests and PodTemplates by the Workload they name, so that
    each reconcile's cleanup reads the Workload's own instead of its whole namespace's
    (which grows with every pending gang): requests by their Workload annotation and
    Workload uid label, templates by their Workload name label."""

    def __init__(self, requests: store.Store, templates: store.Store) -> None:
        self._requests = store.Index(requests, _request_keys)
        self._templates = store.Index(templates, _template_keys)

    def requests(self, namespace: str, name: str, uid: str | None) -> list[client.Obj]:
        named = self._requests.get((namespace, "workload", f"{namespace}/{name}"))
        if not uid:
            return named
        seen = {id(r) for r in named}
        return named + [r for r in self._requests.get((namespace, "uid", uid))
                        if id(r) not in seen]

    def templates(self, namespace: str, name: str) -> list[client.Obj]:
        return self._templates.get((namespace, provisioning.label_value(name)))


def _managed(obj: client.Obj) -> tuple[str, Mapping[str, Any]] | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(c.MANAGED_LABEL) != "fitgate":
        return None
    return str(meta.get("namespace") or ""), labels


def _request_keys(obj: client.Obj) -> list[tuple[str, str, str]]:
    managed = _managed(obj)
    if managed is None:
        return []
    namespace, labels = managed
    keys = []
    named = ((obj.get("metadata") or {}).get("annotations") or {}).get(c.WORKLOAD_ANNOTATION)
    if named:
        keys.append((namespace, "workload", str(named)))
    if labels.get(c.WORKLOAD_UID_LABEL):
        keys.append((namespace, "uid", str(labels[c.WORKLOAD_UID_LABEL])))
    return keys


def _template_keys(obj: client.Obj) -> list[tuple[str, str]]:
    managed = _managed(obj)
    if managed is None or not managed[1].get(c.WORKLOAD_NAME_LABEL):
        return []
    return [(managed[0], str(managed[1][c.WORKLOAD_NAME_LABEL]))]
