"""Indexes the node ledger reads on every decision, kept current from the stores' events.

The ledger (`ledger.NodeLedger`) runs for every decision, on the event loop. Reading the
stores whole there (every Node to find those created since the oldest request, every Pod
of a namespace to count an admitted gang's bound pods) made a decision cost O(nodes +
pods). These indexes are updated by the store subscriptions instead, one event at a
time, so a decision reads only what it needs:

- `NodesByCreation`: every Node's (creation time, name) in order, with its labels: the
  nodes created since a time are a slice found by bisection (`since`), the nodes created
  before one a prefix (`before`). A Node's heartbeat (same creation time and labels)
  leaves it as it is.
- `BoundPods`: per (namespace, placement owner) the number of pods bound to each node,
  counted from the placement labels fitgate puts on a gang's pods (`PLACEMENT_LABEL`, or
  `PLACEMENT_WORKLOAD_LABEL` where the template had its own).

Both are built from what the store holds when made, then follow its events. A store
tells its subscribers the object as it was before each change (`store.Store.apply`), and
a relist arrives as the differences (`Store.replace`); each index takes out what the
object counted for before and adds what it counts for now, so a DELETED event whose
final state is unknown or stale removes exactly what was counted.
`tests/admission/check/test_ledgerindex.py` compares both with a recomputation from the
store after sequences of such events.
"""

from __future__ import annotations

import bisect
import datetime
import functools
import operator
from collections.abc import Mapping
from typing import Any

from admission import constants as c
from admission.check import predicates
from admission.kube import client, store

#: The creation time of a node whose creationTimestamp cannot be read: before any other.
UNKNOWN = datetime.datetime.min.replace(tzinfo=datetime.UTC)

#: A node as the index holds it: (creation time, name, labels).
Node = tuple[datetime.datetime, str, Mapping[str, Any]]

_TIME = operator.itemgetter(0)
#: Label sets whose matching nodes are kept at most (NodeShapes' labels: few).
_MATCHING_MAX = 256


class NodesByCreation:
    """The Nodes of a store in order of creation time, then name."""

    def __init__(self, nodes: store.Store) -> None:
        self._order: list[tuple[datetime.datetime, str]] = []  # sorted
        self._nodes: dict[str, Node] = {}  # name -> its entry
        self._labels: dict[str, dict[str, str]] = {}  # name -> its labels as strings
        # The nodes whose labels include some labels (a NodeShape's), kept until a node
        # comes, goes or changes its labels: requests for new nodes avoid the existing
        # nodes of their shapes, which a pass over every node found per request.
        self._matching: dict[frozenset[tuple[str, str]], frozenset[str]] = {}
        for obj in nodes.list():
            self._put(obj)
        nodes.subscribe(self._on_event)

    def since(self, time: datetime.datetime | None) -> list[Node]:
        """The nodes created at or after `time` (every node when None), oldest first; a
        node whose creation time cannot be read is never created since a time."""
        start = 0 if time is None else bisect.bisect_left(self._order, time, key=_TIME)
        return [self._nodes[name] for _, name in self._order[start:]]

    def before(self, time: datetime.datetime | None) -> set[str]:
        """Names of the nodes created before `time` (every node when None); a node
        whose creation time cannot be read is never created before a time."""
        if time is None:
            return set(self._nodes)
        first = bisect.bisect_right(self._order, UNKNOWN, key=_TIME)
        end = bisect.bisect_left(self._order, time, key=_TIME)
        return {name for _, name in self._order[first:end]}

    def newest(self) -> datetime.datetime | None:
        """The creation time of the newest node (None: no node)."""
        return self._order[-1][0] if self._order else None

    def all_labels(self) -> Mapping[str, Mapping[str, str]]:
        """Every node's labels as `labels` gives them, by name (do not modify)."""
        return self._labels

    def matching(self, wanted: Mapping[str, str]) -> frozenset[str]:
        """The names of the nodes whose labels (as `labels` gives them) include every
        one of `wanted`."""
        key = frozenset((str(k), str(v)) for k, v in wanted.items())
        hit = self._matching.get(key)
        if hit is None:
            hit = frozenset(name for name, have in self._labels.items()
                            if all(have.get(k) == v for k, v in key))
            if len(self._matching) >= _MATCHING_MAX:
                self._matching.clear()
            self._matching[key] = hit
        return hit

    def labels(self, name: str) -> dict[str, str] | None:
        """The node's labels, keys and values as strings (None: no such node); made once
        per change of the node's labels, not per read (do not modify)."""
        return self._labels.get(name)

    def __len__(self) -> int:
        return len(self._nodes)

    def _on_event(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        if event.type == "DELETED":
            self._drop(store.key_of(before if before is not None else event.object)[1])
        else:
            self._put(event.object)

    def _put(self, obj: client.Obj) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        raw = meta.get("labels")
        labels = raw if isinstance(raw, Mapping) else {}
        created = created_at(meta.get("creationTimestamp"))
        old = self._nodes.get(name)
        if old is not None and old[0] == created and old[2] == labels:
            return  # a heartbeat or a status change: nothing the ledger reads
        if old is not None:
            self._drop(name)
        self._matching.clear()
        self._nodes[name] = (created, name, labels)
        self._labels[name] = {str(k): str(v) for k, v in labels.items()}
        bisect.insort(self._order, (created, name))

    def _drop(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is None:
            return
        del self._labels[name]
        self._matching.clear()
        i = bisect.bisect_left(self._order, (old[0], name))
        del self._order[i]


@functools.lru_cache(maxsize=65536)
def created_at(text: Any) -> datetime.datetime:
    """A creation time (`UNKNOWN` if unreadable; UTC if it names no zone). Cached:
    many nodes share one (created in the same second)."""
    if not isinstance(text, str):
        return UNKNOWN
    parsed = predicates.parse_time(text)
    if parsed is None:
        return UNKNOWN
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


class BoundPods:
    """Pods bound to nodes, counted per (namespace, placement owner) and node."""

    def __init__(self, pods: store.Store | None) -> None:
        self._bound: dict[tuple[str, str], dict[str, int]] = {}
        # (namespace, owner) -> node -> the names of those pods (`names`).
        self._names: dict[tuple[str, str], dict[str, set[str]]] = {}
        if pods is None:
            return
        for obj in pods.list():
            self._count(obj, 1)
        pods.subscribe(self._on_event)

    def of(self, namespace: str, owner: str) -> Mapping[str, int]:
        """node -> how many pods placed for `owner` in `namespace` are bound there."""
        return self._bound.get((namespace, owner), _EMPTY)

    def names(self, namespace: str, owner: str, node: str) -> frozenset[str]:
        """The names of the pods placed for `owner` in `namespace` bound to `node`."""
        return frozenset(self._names.get((namespace, owner), {}).get(node, ()))

    def owners(self) -> int:
        """How many (namespace, owner) have bound pods (tests, metrics)."""
        return len(self._bound)

    def _on_event(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        if before is not None:
            self._count(before, -1)
        if event.type != "DELETED":
            self._count(event.object, 1)

    def _count(self, pod: client.Obj, by: int) -> None:
        name = str((pod.get("metadata") or {}).get("name") or "")
        for key, node in counted(pod):
            names = self._names.setdefault(key, {}).setdefault(node, set())
            if by > 0:
                names.add(name)
            else:
                names.discard(name)
                if not names:
                    del self._names[key][node]
                    if not self._names[key]:
                        del self._names[key]
            per_node = self._bound.setdefault(key, {})
            left = per_node.get(node, 0) + by
            if left > 0:
                per_node[node] = left
            else:
                per_node.pop(node, None)
                if not per_node:
                    del self._bound[key]


def counted(pod: client.Obj) -> list[tuple[tuple[str, str], str]]:
    """What a pod counts for: ((namespace, owner), node) for each placement owner its
    labels name, when it is bound to a node."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return []
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    labels = meta.get("labels") or {}
    owners = {labels.get(c.PLACEMENT_LABEL), labels.get(c.PLACEMENT_WORKLOAD_LABEL)}
    return [((namespace, owner), str(node)) for owner in owners if isinstance(owner, str)]


_EMPTY: Mapping[str, int] = {}


class Requests:
    """The ProvisioningRequests of a store by creation time, and by the (namespace,
    workload uid) their `WORKLOAD_UID_LABEL` names. Nothing is read back here
    (`trusted` decides which are fitgate's): these only narrow what is read."""

    def __init__(self, requests: store.Store) -> None:
        self._order: list[tuple[datetime.datetime, store.Key]] = []  # sorted
        self._objects: dict[store.Key, tuple[datetime.datetime, client.Obj]] = {}
        self._by_owner: dict[tuple[str, str], dict[store.Key, client.Obj]] = {}
        for obj in requests.list():
            self._put(obj)
        requests.subscribe(self._on_event)

    def created_until(self, time: datetime.datetime) -> list[client.Obj]:
        """The requests created at or before `time` (those whose creation time cannot be
        read first), oldest first."""
        end = bisect.bisect_right(self._order, time, key=_TIME)
        return [self._objects[key][1] for _, key in self._order[:end]]

    def of_owner(self, namespace: str, uid: str) -> list[client.Obj]:
        """The requests of `namespace` labelled for the Workload `uid`."""
        return list(self._by_owner.get((namespace, uid), {}).values())

    def __len__(self) -> int:
        return len(self._objects)

    def _on_event(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        self._drop(store.key_of(before if before is not None else event.object))
        if event.type != "DELETED":
            self._put(event.object)

    def _put(self, obj: client.Obj) -> None:
        key = store.key_of(obj)
        meta = obj.get("metadata") or {}
        created = created_at(meta.get("creationTimestamp"))
        self._objects[key] = (created, obj)
        bisect.insort(self._order, (created, key))
        owner = _owner(obj)
        if owner is not None:
            self._by_owner.setdefault(owner, {})[key] = obj

    def _drop(self, key: store.Key) -> None:
        old = self._objects.pop(key, None)
        if old is None:
            return
        del self._order[bisect.bisect_left(self._order, (old[0], key))]
        owner = _owner(old[1])
        if owner is not None:
            same = self._by_owner[owner]
            del same[key]
            if not same:
                del self._by_owner[owner]


def _owner(obj: client.Obj) -> tuple[str, str] | None:
    meta = obj.get("metadata") or {}
    uid = (meta.get("labels") or {}).get(c.WORKLOAD_UID_LABEL)
    return (str(meta.get("namespace") or ""), str(uid)) if uid else None
