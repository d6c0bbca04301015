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
