"""An in-memory index of one kind's objects, filled by a watch (`cache`) or by a test.

Readers (reconcilers, the gate, the webhook) only read stores and subscribe to their
changes; they never list the API server per decision. A subscriber is called after the
store changed, with the event and the object as it was before (None for ADDED).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

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
