"""Objects as the watch caches keep them: without what no reader reads, and compact.

Every object an informer lists or watches passes here once, before it is stored
(`cache.Informer`), so the stores hold one form of it:

- Removed: `metadata.managedFields` (server-side apply bookkeeping, often the largest
  part of a small object), kubectl's `last-applied-configuration` annotation (a copy of
  the object as last applied), and, of Nodes and Pods, the status fields no reader
  reads (`UNREAD_STATUS`: a Node's images, node info, addresses, volumes; a Pod's
  container statuses and IPs). `tests/admission/kube/test_compact.py` checks that what
  fitcore and the service read of a full Node and Pod survives, and that the decision
  reads (`fitcore.Inventory.apply`) give the same answers with and without compacting.
- Shared: equal small leaves. A ResourceSlice repeats the same small objects for every
  device (`{"string": "H100"}`, `{"int": 3}`, a capacity `{"memory": {"value":
  "80Gi"}}`, a counter consumption), and Pods of one job repeat their owner references;
  each such dict or list (at most `LEAF_ENTRIES` entries, every value a scalar or itself
  shared) is replaced by the one equal instance already kept (`Leaves`, bounded). Keys
  and short strings are interned, so a name or label read from many objects is one
  string (the client parses each response afresh).

Stored objects are read-only by contract (`store.Store.get`: "do not modify it: copy
first"); sharing a leaf between objects relies on that, as sharing the whole object
between the store and its subscribers already does.
"""

from __future__ import annotations

import sys
from typing import Any

from admission.kube import client

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

#: Status fields of a kind that nothing in fitgate reads (fitcore reads a Node's
#: allocatable, a Pod's phase; the service a Node's labels and creation time).
UNREAD_STATUS: dict[str, frozenset[str]] = {
    "Node": frozenset({"images", "nodeInfo", "addresses", "daemonEndpoints", "volumesInUse",
                       "volumesAttached", "config", "runtimeHandlers", "features"}),
    "Pod": frozenset({"containerStatuses", "initContainerStatuses",
                      "ephemeralContainerStatuses", "podIP", "podIPs", "hostIP", "hostIPs"}),
}

#: A dict or list with at most this many entries may be shared.
LEAF_ENTRIES = 3
#: Strings up to this length are interned (names, label keys and values, attribute
#: values; not messages or embedded documents).
INTERNED_CHARS = 64
_SCALARS = frozenset({str, int, float, bool, type(None)})


class Leaves:
    """The shared instances of small leaves, by content; emptied at `limit` entries, so
    unique leaves (a device's uuid) cannot make it grow without bound."""

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self._kept: dict[tuple[Any, ...], Any] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def share(self, key: tuple[Any, ...], value: Any) -> Any:
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            self._kept[key] = found = value
        return found


LEAVES = Leaves()


def compact(obj: client.Obj, kind: str | None = None, leaves: Leaves = LEAVES) -> client.Obj:
    """A compact copy of `obj` (of `kind`, default its own `kind` field): see the module
    docstring. The argument is not modified."""
    kind = kind or obj.get("kind")
    top = dict(obj)
    meta = top.get("metadata")
    if type(meta) is dict:
        meta = top["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        annotations = meta.get("annotations")
        if type(annotations) is dict and LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    unread = UNREAD_STATUS.get(kind or "")
    status = top.get("status")
    if unread and type(status) is dict and not unread.isdisjoint(status):
        top["status"] = {k: v for k, v in status.items() if k not in unread}
    # The object and its metadata are its own, never shared (they say which object it is).
    out = {}
    for k, v in top.items():
        if k == "metadata" and type(v) is dict:
            v = {_key(mk): _compact(mv, leaves)[0] for mk, mv in v.items()}
        else:
            v = _compact(v, leaves)[0]
        out[_key(k)] = v
    return out


def _key(k: Any) -> Any:
    return sys.intern(k) if type(k) is str else k


def _compact(value: Any, leaves: Leaves) -> tuple[Any, bool]:
    """(the compact value, whether it is shared or a scalar: a leaf of its parent's key).
    Strings and other scalars are handled inline (most values are), containers recurse."""
    kind = type(value)
    if kind is dict:
        out = {}
        # The key of a shareable dict: its keys, each value's type and the value (or the
        # id of a shared one). The type is part of it: 1, 1.0 and True are equal in
        # Python, not in JSON.
        key: list[Any] | None = ["d"] if len(value) <= LEAF_ENTRIES else None
        for k, v in value.items():
            t = type(v)
            if t is str:
                if len(v) <= INTERNED_CHARS:
                    v = sys.intern(v)
                leaf = True
            elif t is dict or t is list:
                v, leaf = _compact(v, leaves)
            else:
                leaf = t in _SCALARS
            if type(k) is str:
                k = sys.intern(k)
            out[k] = v
            if key is not None:
                if leaf:
                    key += (k, t, v if t in _SCALARS else id(v))
                else:
                    key = None
        if key is None:
            return out, False
        return leaves.share(tuple(key), out), True
    if kind is list:
        items = []
        key = ["l"] if len(value) <= LEAF_ENTRIES else None
        for v in value:
            t = type(v)
            if t is str:
                if len(v) <= INTERNED_CHARS:
                    v = sys.intern(v)
                leaf = True
            elif t is dict or t is list:
                v, leaf = _compact(v, leaves)
            else:
                leaf = t in _SCALARS
            items.append(v)
            if key is not None:
                if leaf:
                    key += (t, v if t in _SCALARS else id(v))
                else:
                    key = None
        if key is None:
            return items, False
        return leaves.share(tuple(key), items), True
    if kind is str:
        return (sys.intern(value) if len(value) <= INTERNED_CHARS else value), True
    return value, kind in _SCALARS
