"""FitPolicy status: whether fitgate can read each policy, and if not, every bad field.

A FitPolicy that cannot be read is not applied (`policy.parse_all`); this controller says
so where its author looks, as the condition `Valid` on the policy's status:

    status:
      observedGeneration: 3
      conditions:
      - type: Valid
        status: "False"
        reason: Invalid
        message: "FitPolicy team-a: spec.enforcement: must be warn or deny, got 'block'"

It is a leader-only controller of the reconcile runtime (keys: policy names), and writes
only when the condition or the observed generation changes (`lastTransitionTime` moves
only when the status does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from admission import clock as clock_
from admission.kube import client, errors, kinds, store
from admission.policy import fitpolicy as policy
from admission.runtime import workqueue

CONDITION = "Valid"
_MESSAGE_LIMIT = 32_768


def desired(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Valid condition (without lastTransitionTime) a policy object should carry."""
    try:
        policy.parse(obj)
    except policy.PolicyError as exc:
        return {"type": CONDITION, "status": "False", "reason": "Invalid",
                "message": str(exc)[:_MESSAGE_LIMIT]}
    return {"type": CONDITION, "status": "True", "reason": "Valid",
            "message": "fitgate applies this policy"}


class PolicyStatusController:
    name = "fitpolicy-status"
    leader_only = True
    watches: tuple[kinds.Kind, ...] = (kinds.FIT_POLICY,)

    def __init__(self, api: client.Client, policies: store.Store, *,
                 clock: clock_.Clock | None = None) -> None:
        self.api = api
        self.policies = policies
        self.clock = clock or clock_.SystemClock()

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        if event.type != "DELETED":
            yield workqueue.key_of(event.object)

    async def reconcile(self, key: str) -> float | None:
        _, name = workqueue.split(key)
        obj = self.policies.get(name)
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        have = next((c for c in status.get("conditions") or []
                     if isinstance(c, Mapping) and c.get("type") == CONDITION), None)
        want = desired(obj)
        same = have is not None and all(have.get(k) == v for k, v in want.items())
        generation = meta.get("generation")
        if same and status.get("observedGeneration") == generation:
            return None
        when = (have or {}).get("lastTransitionTime") if same else None
        condition = {**want, "lastTransitionTime": when or self.clock.now().strftime(
            "%Y-%m-%dT%H:%M:%SZ")}
        patch: dict[str, Any] = {"status": {"conditions": [condition]}}
        if generation is not None:
            patch["status"]["observedGeneration"] = generation
        try:
            await self.api.patch(kinds.FIT_POLICY, name, patch, subresource="status")
        except errors.NotFound:
            return None
        return None
