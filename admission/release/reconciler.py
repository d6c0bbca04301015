"""Pod release: the scheduler binds a gang's pods in fitcore's order, one node at a time.

Why: podSetUpdates act on a whole pod set, but kube-scheduler takes pods one at a time in
its own order and allocates devices greedily; fitcore's placement holds when the pods of a
node bind in the order fitcore placed them (each pod's devices assume the pods before it
hold theirs). A launcher taking the one GPU next to the only free NIC before the workers
that need both can break a gang that fits. So, as Kueue's topology-aware scheduling does:

1. A Ready check's podSetUpdates label the pods `fitgate.io/placement: <workload uid>`
   (`admission.check.podsetupdates`) and the Workload reconciler stores the placements,
   in fitcore's order, in a ConfigMap `fitgate-placement-<uid>` owned by the Workload.
2. The Pod mutating webhook (objectSelector on that label, failurePolicy Fail) adds the
   scheduling gate `fitgate.io/placement` when a pod is created: `gate_patch`.
3. This controller gives each gated pod of the workload a *slot*, one of fitcore's
   placements of its pod set (pods of a pod set are interchangeable; a Job's completion
   index picks the slot of that index when it is free), writes it to the pod
   (`nodeSelector: {kubernetes.io/hostname: <node>}`, allowed on a gated pod, and the
   annotation `fitgate.io/slot`), and removes the gate when every earlier slot on the
   same node (in fitcore's order) is held by a pod that is bound or done. The next pod on
   a node is released only after the previous one is bound.

A restarted controller recomputes everything from the pods (their slot annotations, gates
and nodeName) and the ConfigMap. Fail-open where holding would strand pods: without the
ConfigMap (placements lost) or for more pods than slots (replacements beyond the gang),
the gate is removed without a node pin. See docs/ordering.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog

from admission import constants as c
from admission.kube import client, errors, kinds, store
from admission.release import podindex

log = structlog.get_logger(__name__)

JsonPatch = list[dict[str, Any]]


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def workload_uid(pod: Mapping[str, Any]) -> str | None:
    """The uid of the Workload whose placement a pod follows (None: not fitgate's)."""
    labels = _meta(pod).get("labels") or {}
    return labels.get(c.PLACEMENT_WORKLOAD_LABEL) or labels.get(c.PLACEMENT_LABEL) or None


def gate_patch(pod: Mapping[str, Any]) -> JsonPatch:
    """The webhook's JSON patch for a Pod CREATE: add fitgate's scheduling gate to a pod
    labelled for ordered release; nothing for other pods, pods already gated or bound."""
    if workload_uid(pod) is None or _spec(pod).get("nodeName"):
        return []
    gates = _spec(pod).get("schedulingGates")
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates",
                 "value": [{"name": c.SCHEDULING_GATE}]}]
    if any(isinstance(g, Mapping) and g.get("name") == c.SCHEDULING_GATE for g in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-",
             "value": {"name": c.SCHEDULING_GATE}}]


# ------------------------------------------------------------------ decisions


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    pod_set: str
    index: int  # fitcore's pod index within the pod set
    node: str
    order: int  # position in fitcore's placement order (over the whole gang)

    @property
    def name(self) -> str:
        return f"{self.pod_set}/{self.index}"


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    pod: str
    patch: JsonPatch
    slot: Slot | None  # None: released without a pin
    release: bool


def slots_from(placements: Sequence[Mapping[str, Any]]) -> list[Slot]:
    return [Slot(str(p["podSet"]), int(p["index"]), str(p["node"]), i)
            for i, p in enumerate(placements)]


def _gate_index(pod: Mapping[str, Any]) -> int | None:
    for i, g in enumerate(_spec(pod).get("schedulingGates") or []):
        if isinstance(g, Mapping) and g.get("name") == c.SCHEDULING_GATE:
            return i
    return None


def _done(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase in ("Succeeded", "Failed") or bool(_meta(pod).get("deletionTimestamp"))


def _pod_set(pod: Mapping[str, Any]) -> str | None:
    labels = _meta(pod).get("labels") or {}
    return labels.get(c.KUEUE_POD_SET_LABEL) or labels.get(c.POD_SET_LABEL)


def _completion_index(pod: Mapping[str, Any]) -> int | None:
    meta = _meta(pod)
    raw = (meta.get("labels") or {}).get(c.COMPLETION_INDEX_LABEL) or (
        meta.get("annotations") or {}).get(c.COMPLETION_INDEX_ANNOTATION)
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def _held_slot(pod: Mapping[str, Any]) -> str | None:
    raw = (_meta(pod).get("annotations") or {}).get(c.SLOT_ANNOTATION)
    return str(raw) if raw else None


def _release_ops(pod: Mapping[str, Any]) -> JsonPatch:
    i = _gate_index(pod)
    if i is None:
        return []
    return [{"op": "test", "path": f"/spec/schedulingGates/{i}/name",
             "value": c.SCHEDULING_GATE},
            {"op": "remove", "path": f"/spec/schedulingGates/{i}"}]


def _assign_ops(pod: Mapping[str, Any], slot: Slot, hostname: str | None = None
                ) -> JsonPatch:
    """Pin `pod` to `slot`'s node by its `kubernetes.io/hostname` label (`hostname`: the
    node's label value, which may differ from its name; None: the name)."""
    ops: JsonPatch = []
    if _meta(pod).get("annotations") is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(c.SLOT_ANNOTATION)}",
                "value": slot.name})
    if _spec(pod).get("nodeSelector") is None:
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {}})
    ops.append({"op": "add", "path": f"/spec/nodeSelector/{_escape(c.HOSTNAME_LABEL)}",
                "value": hostname or slot.node})
    return ops


def decide(slots: Sequence[Slot] | None, pods: Sequence[Mapping[str, Any]],
           hostname_of: Callable[[str], str | None] | None = None) -> list[Action]:
    """What to write to a workload's pods now (see the module docstring).

    `slots`: fitcore's placements in order, None when they are lost. `pods`: the
    workload's pods (gated or not). `hostname_of`: a node's `kubernetes.io/hostname`
    label (None or absent: its name; Karpenter's kwok provider, for one, labels a node
    with its NodeClaim's name)."""
    live = sorted((p for p in pods if not _done(p)),
                  key=lambda p: (str(_meta(p).get("creationTimestamp") or ""),
                                 str(_meta(p).get("name"))))
    gated = [p for p in live if _gate_index(p) is not None]
    if slots is None:
        return [Action(str(_meta(p)["name"]), _release_ops(p), None, True) for p in gated]
    by_name = {s.name: s for s in slots}
    holder: dict[str, Mapping[str, Any]] = {}
    for p in live:
        held = _held_slot(p)
        if held in by_name and held not in holder:
            holder[held] = p
    fresh: dict[str, Slot] = {}  # pod name -> slot assigned now
    waiting = [p for p in gated if _held_slot(p) not in by_name
               or holder.get(str(_held_slot(p))) is not p]
    for want_index in (True, False):
        for p in waiting:
            name = str(_meta(p)["name"])
            if name in fresh:
                continue
            pod_set = _pod_set(p)
            free = [s for s in slots if s.pod_set == pod_set and s.name not in holder]
            index = _completion_index(p)
            if want_index:
                free = [s for s in free if index is not None and s.index == index]
            if free:
                holder[free[0].name] = p
                fresh[name] = free[0]
    actions: list[Action] = []
    for p in gated:
        name = str(_meta(p)["name"])
        held = _held_slot(p)
        slot = fresh.get(name) or (by_name.get(held) if held and holder.get(held) is p
                                   else None)
        if slot is None:
            actions.append(Action(name, _release_ops(p), None, True))  # beyond the gang
            continue
        ops = _assign_ops(p, slot, hostname_of(slot.node) if hostname_of else None) \
            if name in fresh else []
        earlier = [s for s in slots if s.node == slot.node and s.order < slot.order]
        ready = all(s.name in holder and (_spec(holder[s.name]).get("nodeName")
                                          or _done(holder[s.name]))
                    for s in earlier)
        if ready:
            ops += _release_ops(p)
        if ops:
            actions.append(Action(name, ops, slot, ready))
    return actions


# ------------------------------------------------------------------ controller


def _older(pod: Mapping[str, Any], than: Mapping[str, Any]) -> bool:
    """Whether `pod` is an older version of the same pod than `than` (same uid, smaller
    resourceVersion). Unknown or non-numeric versions count as not older: the store wins."""
    a, b = _meta(pod), _meta(than)
    if a.get("uid") != b.get("uid"):
        return False
    rv_a, rv_b = str(a.get("resourceVersion") or ""), str(b.get("resourceVersion") or "")
    return rv_a.isdigit() and rv_b.isdigit() and int(rv_a) < int(rv_b)


def key_of(pod: Mapping[str, Any]) -> store.Key | None:
    """The release controller's key of a pod: (namespace, workload uid)."""
    uid = workload_uid(pod)
    return (str(_meta(pod).get("namespace") or ""), uid) if uid else None


class ReleaseController:
    """Reconciles `namespace/<workload uid>`: writes `decide`'s actions to the pods."""

    # The controller runtime's interface (admission.runtime.workqueue).
    name = "release"
    leader_only = True
    watches = (kinds.POD,)

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        key = key_of(event.object)
        return [f"{key[0]}/{key[1]}"] if key else []

    def __init__(self, api: client.Client, pods: store.Store,
                 nodes: store.Store | None = None) -> None:
        self.api = api
        self.pods = pods
        # Each gang's pods, kept from the store's events (`podindex`): a reconcile reads
        # its gang's pods, not every pod of the namespace.
        self.gangs = podindex.PodsByWorkload(pods, workload_uid)
        self.nodes = nodes  # for the nodes' hostname labels (None: pin by node name)
        # The pods as our own patches returned them, per key, until the store catches up:
        # the store lags the API, and deciding on a pod that does not show the slot we just
        # gave it would give that slot to a second pod (two pods pinned to one node).
        self._written: dict[str, dict[str, client.Obj]] = {}

    def _current(self, key: str, pods: list[client.Obj]) -> list[client.Obj]:
        """`pods` with each replaced by what our last patch returned for it, while the
        store's copy is older than that (resourceVersions compared as etcd's integers)."""
        written = self._written.get(key)
        if not written:
            return pods
        out = []
        for p in pods:
            name = str(_meta(p).get("name"))
            ours = written.get(name)
            if ours is not None and _older(p, ours):
                out.append(ours)
                continue
            written.pop(name, None)
            out.append(p)
        live = {str(_meta(p).get("name")) for p in pods}
        for gone in set(written) - live:
            del written[gone]
        if not written:
            del self._written[key]
        return out

    def hostname_of(self, node: str) -> str | None:
        """The node's `kubernetes.io/hostname` label, if the node and the label are known."""
        obj = self.nodes.get(node) if self.nodes is not None else None
        value = ((obj or {}).get("metadata") or {}).get("labels", {}).get(c.HOSTNAME_LABEL)
        return str(value) if value else None

    async def placements(self, namespace: str, uid: str) -> list[Slot] | None:
        try:
            cm = await self.api.get(kinds.CONFIG_MAP, c.PLACEMENTS_PREFIX + uid, namespace)
        except errors.NotFound:
            return None
        try:
            return slots_from(json.loads((cm.get("data") or {})[c.PLACEMENTS_KEY]))
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("unreadable placements; releasing unpinned", uid=uid, error=str(exc))
            return None

    async def reconcile(self, key: str) -> float | None:
        namespace, _, uid = key.rpartition("/")
        pods = self._current(key, self.gangs.of(namespace, uid))
        if not any(_gate_index(p) is not None for p in pods):
            return None
        slots = await self.placements(namespace, uid)
        if slots is None:
            log.warning("no placements for gated pods; releasing them unpinned",
                        namespace=namespace, uid=uid)
        again = False
        for action in decide(slots, pods, self.hostname_of):
            try:
                written = await self.api.patch(kinds.POD, action.pod, action.patch,
                                               namespace=namespace, patch_type="json")
                self._written.setdefault(key, {})[action.pod] = written
            except errors.NotFound:
                continue
            except errors.ApiError as exc:
                if exc.status not in (409, 422):
                    raise
                again = True  # the pod changed under us: decide again on the news
            if action.slot is not None:
                log.debug("pod placed", pod=action.pod, slot=action.slot.name,
                          node=action.slot.node, released=action.release)
        return 1.0 if again else None
