"""NodeShape status: whether fitgate plans with each shape, and how many nodes it has.

A NodeShape the API server stores can still be one fitgate refuses: the engine's reader
is stricter than the CRD's schema (fields it does not know, a selector or quantity the
schema cannot check), or the shape asks for something this fitgate does not do (a shape
Karpenter serves, with `karpenter` off). The engine leaves such a shape out of every
plan (`inventory.ClusterInventory.problems`); this controller says so where its author
looks, as the condition `Valid` on the shape's status, with a Warning Event on the shape
(reason `InvalidShape`) when it turns invalid or its reason changes:

    status:
      observedGeneration: 2
      nodes: 3
      conditions:
      - type: Valid
        status: "False"
        reason: Invalid
        message: "NodeShape h100: spec.resourceSlices[0].devices[0].attributes: ..."

`nodes` counts the existing Nodes of the shape: those carrying every label of its
`spec.nodeLabels`, as the planner counts them against `maxNodes`
(`fitcore.NodeShape.matches`). It is left out while `spec.nodeLabels` is not a map.

It is a leader-only controller of the reconcile runtime (keys: shape names; a Node
added, deleted or relabelled queues the shapes it joins or leaves), and writes only when
the condition, the node count or the observed generation changes (`lastTransitionTime`
moves only when the condition's status does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import fitcore
from admission import clock as clock_
from admission.kube import client, errors, kinds, store
from admission.runtime import events, workqueue

CONDITION = "Valid"
#: The reason of the Warning Event on a shape fitgate refuses.
EVENT_REASON = "InvalidShape"
_MESSAGE_LIMIT = 32_768


def _labels(obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The shape's node labels, or None when `spec.nodeLabels` is not a map of strings."""
    spec = obj.get("spec")
    labels = spec.get("nodeLabels", {}) if isinstance(spec, Mapping) else None
    if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return None
    return dict(labels)


def _node_labels(node: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (node or {}).get("metadata") or {}
    labels = meta.get("labels")
    return labels if isinstance(labels, Mapping) else {}


def of_shape(labels: Mapping[str, str], node: Mapping[str, Any] | None) -> bool:
    """Whether a Node object is of a shape with these node labels."""
    if node is None:
        return False
    have = _node_labels(node)
    return all(have.get(k) == v for k, v in labels.items())


def count_nodes(obj: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> int | None:
    """The existing nodes of the shape `obj` (None: its node labels cannot be read)."""
    labels = _labels(obj)
    if labels is None:
        return None
    return sum(1 for n in nodes if of_shape(labels, n))


def desired(obj: Mapping[str, Any], *, kube_version: str = fitcore.DEFAULT_KUBE_VERSION,
            karpenter: bool = True) -> dict[str, Any]:
    """The Valid condition (without lastTransitionTime) a NodeShape object should carry:
    False when the engine's inventory refuses it (`fitcore.Inventory.apply`, the reader
    the service plans with), or when Karpenter serves it and this fitgate does not serve
    Karpenter's shapes (`karpenter` off)."""
    body = {**obj, "apiVersion": obj.get("apiVersion") or kinds.NODE_SHAPE.api_version,
            "kind": obj.get("kind") or kinds.NODE_SHAPE.kind}
    body.pop("status", None)
    try:
        fitcore.Inventory(kube_version=kube_version).apply("ADDED", body)
    except fitcore.InputError as exc:
        return {"type": CONDITION, "status": "False", "reason": "Invalid",
                "message": str(exc)[:_MESSAGE_LIMIT]}
    shape = fitcore.node_shape(body)
    if shape.karpenter is not None and not karpenter:
        return {"type": CONDITION, "status": "False", "reason": "KarpenterNotServed",
                "message": f"NodeShape {shape.name}: spec.provisioning.karpenter: Karpenter "
                           "serves this shape and this fitgate does not create NodeClaims "
                           "(config karpenter, chart value karpenter.enabled); no plan "
                           "uses it"}
    return {"type": CONDITION, "status": "True", "reason": "Valid",
            "message": "fitgate plans with this shape"}


class ShapeStatusController:
    """See the module docstring. `nodes`: the Node store, for the node count."""

    name = "nodeshape-status"
    leader_only = True
    watches: tuple[kinds.Kind, ...] = (kinds.NODE_SHAPE, kinds.NODE)

    def __init__(self, api: client.Client, shapes: store.Store, nodes: store.Store, *,
                 clock: clock_.Clock | None = None,
                 kube_version: str = fitcore.DEFAULT_KUBE_VERSION, karpenter: bool = False,
                 recorder: events.Recorder | None = None) -> None:
        self.api = api
        self.shapes = shapes
        self.nodes = nodes
        self.clock = clock or clock_.SystemClock()
        self.kube_version = kube_version
        self.karpenter = karpenter
        self.recorder = recorder or events.Recorder(api, self.clock)
        #: Verdicts by name, with the uid and generation they were read at: a Node event
        #: or fitgate's own status write re-counts, never re-reads the spec.
        self._verdicts: dict[str, tuple[str, dict[str, Any]]] = {}

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        if kind == kinds.NODE_SHAPE:
            if event.type == "DELETED":
                self._verdicts.pop(workqueue.key_of(event.object), None)
            else:
                yield workqueue.key_of(event.object)
            return
        after = None if event.type == "DELETED" else event.object
        if event.type == "DELETED":
            before = before or event.object
        if event.type == "MODIFIED" and _node_labels(before) == _node_labels(after):
            return  # heartbeats and status updates change no shape's count
        for shape in self.shapes.list():
            labels = _labels(shape)
            if labels is not None and of_shape(labels, before) != of_shape(labels, after):
                yield workqueue.key_of(shape)

    def _verdict(self, name: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        version = (f"{meta.get('uid')}/{meta.get('generation')}"
                   if meta.get("generation") is not None else "")
        kept = self._verdicts.get(name)
        if kept is not None and version and kept[0] == version:
            return kept[1]
        want = desired(obj, kube_version=self.kube_version, karpenter=self.karpenter)
        self._verdicts[name] = (version, want)
        return want

    async def reconcile(self, key: str) -> float | None:
        _, name = workqueue.split(key)
        obj = self.shapes.get(name)
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
        assert isinstance(status, Mapping)
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
        have = next((c for c in conditions if c.get("type") == CONDITION), None)
        want = self._verdict(name, obj)
        nodes = count_nodes(obj, self.nodes.list())
        same = have is not None and all(have.get(k) == v for k, v in want.items())
        generation = meta.get("generation")
        if (same and status.get("observedGeneration") == generation
                and status.get("nodes") == nodes):
            return None
        when = (have or {}).get("lastTransitionTime") if (
            have is not None and have.get("status") == want["status"]) else None
        condition = {**want, "lastTransitionTime": when or self.clock.now().strftime(
            "%Y-%m-%dT%H:%M:%SZ")}
        # A merge patch replaces the list: the other conditions go back as they were.
        kept = [dict(c) for c in conditions if c.get("type") != CONDITION]
        patch: dict[str, Any] = {"status": {"conditions": [*kept, condition], "nodes": nodes}}
        if generation is not None:
            patch["status"]["observedGeneration"] = generation
        try:
            await self.api.patch(kinds.NODE_SHAPE, name, patch, subresource="status")
        except errors.NotFound:
            return None
        if want["status"] == "False" and not same:
            await self.recorder.record(obj, "Warning", EVENT_REASON, want["message"],
                                       action="Validate", kind=kinds.NODE_SHAPE)
        return None
