"""A store's lists: every object, or one namespace's, the same as filtering the whole
store, in the order objects were first stored, through adds, changes, deletes and
relists."""

from __future__ import annotations

import random
from typing import Any

import pytest

from admission.kube import client, kinds, store


def pod(name: str, namespace: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)}}


@pytest.mark.parametrize("seed", range(8))
def test_a_namespace_list_equals_the_whole_list_filtered(seed: int) -> None:
    rng = random.Random(seed)
    s = store.Store(kinds.POD)
    spaces = ["a", "b", "c", ""]
    for rv in range(300):
        name, ns = rng.choice("pqrstu"), rng.choice(spaces)
        move = rng.random()
        if move < 0.05:
            s.replace([o for o in s.list() if rng.random() < 0.6] + [pod(name, ns, rv)])
        elif move < 0.35:
            s.apply(client.WatchEvent("DELETED", pod(name, ns, rv)))
        else:
            s.apply(client.WatchEvent("MODIFIED", pod(name, ns, rv)))
        whole = s.list()
        assert len(whole) == len(s)
        for ns in [*spaces, "elsewhere"]:
            assert s.list(ns) == [o for o in whole if store.key_of(o)[0] == ns], ns


def owned(name: str, namespace: str, rv: int, owner: str | None) -> dict[str, Any]:
    obj = pod(name, namespace, rv)
    if owner is not None:
        obj["metadata"]["labels"] = {"owner": owner}
    return obj


def owner_keys(obj: client.Obj) -> list[tuple[str, str]]:
    owner = ((obj.get("metadata") or {}).get("labels") or {}).get("owner")
    return [(store.key_of(obj)[0], owner)] if owner else []


@pytest.mark.parametrize("seed", range(8))
def test_an_index_equals_the_store_filtered_through_changes_of_key(seed: int) -> None:
    """Objects move between keys (their owner label changes), lose it, are deleted and
    relisted: each key's objects are always the store's objects with that key."""
    rng = random.Random(seed)
    s = store.Store(kinds.POD)
    s.seed(owned("early", "a", 0, "x"))  # indexed when the index is made
    index = store.Index(s, owner_keys)
    owners = ["x", "y", None]
    for rv in range(1, 300):
        obj = owned(rng.choice("pqrs"), rng.choice("ab"), rv, rng.choice(owners))
        move = rng.random()
        if move < 0.05:
            s.replace([o for o in s.list() if rng.random() < 0.6] + [obj])
        elif move < 0.3:
            s.apply(client.WatchEvent("DELETED", obj))
        else:
            s.apply(client.WatchEvent("MODIFIED", obj))
        for ns in "ab":
            for owner in ("x", "y"):
                want = [o for o in s.list(ns) if owner_keys(o) == [(ns, owner)]]
                assert sorted(map(store.key_of, index.get((ns, owner)))) == \
                    sorted(map(store.key_of, want)), (ns, owner)
                assert all(o is s.get(*reversed(store.key_of(o)))
                           for o in index.get((ns, owner)))
