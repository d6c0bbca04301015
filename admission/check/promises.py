"""Promises that survive failover: a new leader reads back the nodes promised to gangs
another leader admitted.

Between Ready and its pods binding, an admitted gang's devices are not yet allocated, so
the inventory shows them free; the Workload reconciler keeps those nodes out of other
gangs' decisions until the pods have bound (`ledger.NodeLedger.promised_nodes`). A
replica that takes over leadership starts with an empty memory: without this module it
would see those nodes free and could admit a second gang onto them.

Where the promise is persisted. Nothing new is written: a promise is made of two things
fitgate already writes, in this order, before a gang counts as admitted:

1. the placements ConfigMap (`fitgate-placement-<workload uid>` in the Workload's
   namespace, owned by the Workload): every pod's node, written by `sync_placements`
   before the check is set Ready, and read by the pod release controller;
2. fitgate's own `status.admissionChecks` entry on the Workload, `Ready`, whose
   `lastTransitionTime` says when the promise was made.

So the promise is on disk before any pod of the gang can be released, and it is in places
Kueue and users do not trip on: Kueue never reads ConfigMaps and ignores the entries of
checks it does not run, no user edits the ConfigMap (it is fitgate's, garbage-collected
with the Workload), and nothing is added to the Workload's metadata, which Kueue's job
reconcilers compare with the Job's. An annotation on the ProvisioningRequest would not do:
a gang that fits existing nodes has no request, and the request is deleted once used.

How it is read back. `Recovery.into(promised)` runs before the reconciler decides: for
every Workload whose fitgate check is Ready, whose Ready is younger than the promise
lifetime (`promise_seconds`), and whose promise the reconciler does not hold yet, it reads
the placements ConfigMap (one GET per such Workload, once per admission) and adds the
promise with its age. The reconciler's own rules then end it as before (all pods bound,
or `promise_seconds` passed). A ConfigMap that is missing or does not read back is logged
and skipped: the inventory and the gang's bound pods are then the only guard, as before.
The scan of the Workload store runs at most once per `scan_seconds`. Gangs this reconciler
promised itself (`made`) are never read back: its memory already knows when their pods
bound, and reading back a promise that ended would hold the nodes again once the pods
have finished and been deleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import structlog

import fitcore
from admission import clock as clock_
from admission import constants as c
from admission import kueue
from admission.check import predicates
from admission.kube import client, errors, kinds, store

log = structlog.get_logger(__name__)

#: uid -> (namespace, pods placed per node, since: the clock's monotonic seconds)
Promised = MutableMapping[str, tuple[str, dict[str, int], float]]

#: Placements read back per ConfigMap at most (a gang's pods; a bound on bad input).
MAX_PLACEMENTS = 1_000_000


class PlacementsError(ValueError):
    """A placements ConfigMap that does not read back; the message names it and the field."""


def placements_config_map(wl: Mapping[str, Any], placements: Sequence[fitcore.Placement]
                          ) -> dict[str, Any]:
    """The placements ConfigMap of a Workload: its gang's placements in fitcore's order,
    named after the Workload's uid and owned by it (what `per_node` reads back)."""
    meta = wl.get("metadata") or {}
    data = {c.PLACEMENTS_KEY: json.dumps(
        [{"podSet": p.pod_set, "index": p.index, "node": p.node} for p in placements],
        separators=(",", ":"))}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": c.PLACEMENTS_PREFIX + str(meta.get("uid")),
                         "namespace": meta.get("namespace"),
                         "labels": {c.MANAGED_LABEL: "fitgate",
                                    c.WORKLOAD_UID_LABEL: str(meta.get("uid"))},
                         "annotations": {c.WORKLOAD_ANNOTATION:
                                         f"{meta.get('namespace')}/{meta.get('name')}"},
                         "ownerReferences": [{
                             "apiVersion": kinds.WORKLOAD.api_version, "kind": "Workload",
                             "name": meta.get("name"), "uid": meta.get("uid")}]},
            "data": data}


def per_node(cm: Mapping[str, Any]) -> dict[str, int]:
    """Pods placed per node in a placements ConfigMap (as `sync_placements` writes it)."""
    meta = cm.get("metadata") or {}
    where = f"ConfigMap {meta.get('namespace')}/{meta.get('name')}"
    field = f"data[{c.PLACEMENTS_KEY!r}]"
    data = cm.get("data")
    text = data.get(c.PLACEMENTS_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        raise PlacementsError(f"{where}: {field}: missing")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PlacementsError(f"{where}: {field}: not JSON: {exc}") from None
    if not isinstance(raw, list) or len(raw) > MAX_PLACEMENTS:
        raise PlacementsError(f"{where}: {field}: not a list of at most {MAX_PLACEMENTS} "
                              "placements")
    out: dict[str, int] = {}
    for i, p in enumerate(raw):
        node = p.get("node") if isinstance(p, Mapping) else None
        if not isinstance(node, str) or not node:
            raise PlacementsError(f"{where}: {field}[{i}].node: must be a node name")
        out[node] = out.get(node, 0) + 1
    return out


class Recovery:
    """Reads back the promises of gangs admitted by an earlier leader (module docstring)."""

    def __init__(self, api: client.Client, workloads: store.Store, checks: store.Store,
                 clock: clock_.Clock, promise_seconds: float, scan_seconds: float = 1.0
                 ) -> None:
        self.api = api
        self.workloads = workloads
        self.checks = checks
        self.clock = clock
        self.promise_seconds = promise_seconds
        self.scan_seconds = scan_seconds
        # (uid, Ready time) already looked at -> when it may be forgotten (monotonic)
        self._read: dict[tuple[str, str], float] = {}
        self._last_scan: float | None = None
        self._made: dict[str, float] = {}  # uid -> when this reconciler promised it

    def made(self, uid: str) -> None:
        """This reconciler promised the gang `uid` itself (its memory is the truth: once
        the gang's pods have bound, reading the promise back would only hold its nodes
        again, while pods that finished and were deleted no longer end it)."""
        self._made[uid] = self.clock.monotonic()

    def _admitted(self) -> list[tuple[client.Obj, str, float]]:
        """(Workload, uid, age in seconds) of the gangs fitgate admitted within the promise
        lifetime whose placements are not read yet."""
        names = kueue.ours(self.checks.list())
        now = self.clock.now()
        out = []
        for wl in self.workloads.list():
            if kueue.finished(wl) or kueue.evicted(wl):
                continue
            meta = wl.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            if uid in self._made:
                continue
            for e in kueue.entries(wl, names):
                if e.get("state") != c.READY:
                    continue
                since = predicates.parse_time(e.get("lastTransitionTime"))
                if since is None or not uid:
                    continue
                age = (now - since).total_seconds()
                key = (uid, str(e.get("lastTransitionTime")))
                if age <= self.promise_seconds and key not in self._read:
                    out.append((wl, uid, max(0.0, age)))
                    self._read[key] = self.clock.monotonic() + self.promise_seconds - age
                break
        return out

    async def into(self, promised: Promised) -> int:
        """Add to `promised` the promises read back; returns how many were added."""
        now = self.clock.monotonic()
        if self._last_scan is not None and now - self._last_scan < self.scan_seconds:
            return 0
        self._last_scan = now
        for key in [k for k, until in self._read.items() if until < now]:
            del self._read[key]
        for uid in [u for u, at in self._made.items() if now - at > self.promise_seconds]:
            del self._made[uid]
        added = 0
        for wl, uid, age in self._admitted():
            if uid in promised:
                continue
            meta = wl.get("metadata") or {}
            namespace = str(meta.get("namespace") or "")
            name = c.PLACEMENTS_PREFIX + uid
            try:
                cm = await self.api.get(kinds.CONFIG_MAP, name, namespace)
                nodes = per_node(cm)
            except errors.NotFound:
                log.info("admitted gang without placements; no promise to read back",
                         workload=f"{namespace}/{meta.get('name')}")
                continue
            except PlacementsError as exc:
                log.warning("placements ignored", error=str(exc))
                continue
            promised[uid] = (namespace, nodes, now - age)
            added += 1
            log.info("promise read back", workload=f"{namespace}/{meta.get('name')}",
                     nodes=len(nodes), age_seconds=round(age, 1))
        return added
