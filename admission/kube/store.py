"""An in-memory index of one kind's objects, filled by a watch (`cache`) or by a test.

Readers (reconcilers, the gate, the webhook) only read stores and subscribe to their
changes; they never list the API server per decision. A subscriber is called after the
store changed, with the event and the object as it was before (None for ADDED).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable

from admission.kube import client, kinds

Key = tuple[str, str]  # (namespace or "", name)
Subscriber = Callable[[client.WatchEvent, "client.Obj | None"], None]


def key_of(obj: client.Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Store:
    def __init__(self, kind: kinds.Kind) -> None:
        self.kind = kind
        self._objects: dict[Key, client.Obj] = {}
        # The same objects by namespace: a namespace's list reads only its own (a
        # decision reads its namespace's claims or pods, not every bound pod's).
        self._by_namespace: dict[str, dict[Key, client.Obj]] = {}
        self._subscribers: list[Subscriber] = []

    def get(self, name: str, namespace: str | None = None) -> client.Obj | None:
        """The cached object (do not modify it: copy first)."""
        return self._objects.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> list[client.Obj]:
        """Every object, or those of `namespace` ("" for cluster-scoped ones), in the
        order they were first stored."""
        if namespace is None:
            return list(self._objects.values())
        return list(self._by_namespace.get(namespace, {}).values())

    def __len__(self) -> int:
        return len(self._objects)

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    def apply(self, event: client.WatchEvent) -> None:
        """Record one watch event and tell the subscribers."""
        key = key_of(event.object)
        before = self._objects.get(key)
        if event.type == "DELETED":
            if before is None:
                return
            del self._objects[key]
            same = self._by_namespace[key[0]]
            del same[key]
            if not same:
                del self._by_namespace[key[0]]
        else:
            self._objects[key] = event.object
            self._by_namespace.setdefault(key[0], {})[key] = event.object
        for fn in self._subscribers:
            fn(event, before)

    def replace(self, items: Iterable[client.Obj]) -> None:
        """Make the store hold exactly `items` (after a list), telling subscribers of each
        difference as ADDED, MODIFIED or DELETED, so nothing is lost or told twice."""
        fresh = {key_of(o): o for o in items}
        for key, gone in list(self._objects.items()):
            if key not in fresh:
                self.apply(client.WatchEvent("DELETED", gone))
        for key, obj in fresh.items():
            old = self._objects.get(key)
            if old is None:
                self.apply(client.WatchEvent("ADDED", obj))
            elif (old.get("metadata", {}).get("resourceVersion")
                  != obj.get("metadata", {}).get("resourceVersion")):
                self.apply(client.WatchEvent("MODIFIED", obj))

    def seed(self, *objs: client.Obj) -> None:
        """Put objects in place (tests)."""
        for o in objs:
            self.apply(client.WatchEvent("MODIFIED" if key_of(o) in self._objects else "ADDED",
                                         copy.deepcopy(o)))


class Index:
    """A store's objects by keys derived from each (e.g. the Workload an object belongs
    to), kept current by the store's events: a reader asks for one key's objects instead
    of walking a namespace on every reconcile. `keys` returns an object's keys (none:
    the object is not indexed); the objects are the store's own (do not modify them)."""

    def __init__(self, source: Store, keys: Callable[[client.Obj], Iterable[Hashable]]) -> None:
        self._keys = keys
        self._by: dict[Hashable, dict[Key, client.Obj]] = {}
        for obj in source.list():
            self._add(obj)
        source.subscribe(self._on_event)

    def get(self, key: Hashable) -> list[client.Obj]:
        """The objects under `key`, in the order they were indexed."""
        return list(self._by.get(key, {}).values())

    def _on_event(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        if before is not None:
            self._remove(before)
        if event.type != "DELETED":
            self._add(event.object)

    def _add(self, obj: client.Obj) -> None:
        key = key_of(obj)
        for k in self._keys(obj):
            self._by.setdefault(k, {})[key] = obj

    def _remove(self, obj: client.Obj) -> None:
        key = key_of(obj)
        for k in self._keys(obj):
            same = self._by.get(k)
            if same is not None:
                same.pop(key, None)
                if not same:
                    del self._by[k]
