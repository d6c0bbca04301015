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
from admission.kube import client

if TYPE_CHECKING:
    from admission.check import workload


class ProvisioningRequestBackend:
    name = backends.PROVISIONING_REQUEST

    def __init__(self, reconciler: workload.WorkloadReconciler) -> None:
        self.r = reconciler

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
        await capacity.cleanup_requests(self.r, namespace, name, keep_uid, uid)

    async def admitted(self, wl: client.Obj, check: str) -> float | None:
        return None  # the admitted gang's pods consume the request; nothing more to do
