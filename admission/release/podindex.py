"""The pods of each gang, kept from the pod store's events, for the release controller.

The release controller reconciles one gang (`namespace/<workload uid>`) each time one
of its pods changes, and decides on that gang's pods only. Listing the namespace's pods
and keeping those labelled for the gang made each reconcile cost O(pods of the
namespace): during a burst of admitted gangs, thousands of pods, on the event loop, for
every pod event. `PodsByWorkload` keeps, per (namespace, workload uid), the gang's pods by
name, updated one store event at a time, so a reconcile reads only its own.

Built from what the store holds when made, then follows its events: the store tells a
subscriber the object as it was before each change (`store.Store.apply`, None for
ADDED), and a relist arrives as the differences (`Store.replace`), so the index takes the
pod out of the gang it was in before and puts it in the gang it is in now (a pod whose
label changed moves; a DELETED event whose final state is stale removes what was there).
The order of a gang's pods is not meaningful (`reconciler.decide` orders them itself).
`tests/admission/release/test_podindex.py` compares it with the filtered store after
sequences of such events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from admission.kube import client, store

Key = tuple[str, str]  # (namespace, workload uid)


class PodsByWorkload:
    """The pods of a store by (namespace, the uid `owner_of` reads from a pod)."""

    def __init__(self, pods: store.Store, owner_of: Callable[[Mapping[str, Any]], str | None]
                 ) -> None:
        self._owner_of = owner_of
        self._pods: dict[Key, dict[str, client.Obj]] = {}
        for obj in pods.list():
            self._put(obj)
        pods.subscribe(self._on_event)

    def of(self, namespace: str, uid: str) -> list[client.Obj]:
        """The gang's pods (do not modify them)."""
        return list(self._pods.get((namespace, uid), {}).values())

    def gangs(self) -> int:
        """How many gangs have pods (tests)."""
        return len(self._pods)

    def _key(self, pod: Mapping[str, Any]) -> tuple[Key, str] | None:
        uid = self._owner_of(pod)
        if not uid:
            return None
        meta = pod.get("metadata") or {}
        return (str(meta.get("namespace") or ""), uid), str(meta.get("name") or "")

    def _on_event(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        was = self._key(before) if before is not None else None
        now = self._key(event.object) if event.type != "DELETED" else None
        if was is not None and was != now:
            self._drop(*was)
        if now is not None:
            self._pods.setdefault(now[0], {})[now[1]] = event.object

    def _put(self, obj: client.Obj) -> None:
        got = self._key(obj)
        if got is not None:
            self._pods.setdefault(got[0], {})[got[1]] = obj

    def _drop(self, key: Key, name: str) -> None:
        same = self._pods.get(key)
        if same is None:
            return
        same.pop(name, None)
        if not same:
            del self._pods[key]
