"""One pass's view (`inputs.read_pass`): each NodeShape object is parsed once while the
store holds it; a changed, added or deleted NodeShape is seen at the next pass, and a
NodeShape that does not parse stays a problem named by its object."""

from __future__ import annotations

import copy

import pytest

import fitcore
from admission.check import inputs
from admission.kube import client, kinds, store
from tests.admission import world as w


def stores_with(shapes: store.Store) -> inputs.Stores:
    return inputs.Stores.of({k: shapes if k == kinds.NODE_SHAPE else store.Store(k)
                             for k in kinds.ALL})


def test_each_nodeshape_is_parsed_once_while_the_store_holds_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    parse = fitcore.node_shape

    def counting(obj: object) -> fitcore.NodeShape:
        out = parse(obj)  # type: ignore[arg-type]
        parsed.append(out.name)
        return out
    monkeypatch.setattr(fitcore, "node_shape", counting)
    shapes = store.Store(kinds.NODE_SHAPE)
    shapes.seed(w.shape("h100"), w.shape("a100"))
    stores = stores_with(shapes)
    first = inputs.read_pass(stores)
    second = inputs.read_pass(stores)
    assert sorted(parsed) == ["a100", "h100"]
    assert set(first.node_shapes) == set(second.node_shapes) == {"a100", "h100"}
    assert second.node_shapes["h100"] is first.node_shapes["h100"]

    changed = copy.deepcopy(shapes.get("h100"))
    assert changed is not None
    changed["spec"]["price"] = "7"
    shapes.apply(client.WatchEvent("MODIFIED", changed))
    shapes.apply(client.WatchEvent("DELETED", shapes.get("a100") or {}))
    third = inputs.read_pass(stores)
    assert sorted(parsed) == ["a100", "h100", "h100"]
    assert set(third.node_shapes) == {"h100"}
    assert third.node_shapes["h100"] == parse(changed)
    assert third.node_shapes["h100"] != first.node_shapes["h100"]


def test_a_nodeshape_that_does_not_parse_stays_a_problem_at_every_pass() -> None:
    shapes = store.Store(kinds.NODE_SHAPE)
    bad = w.shape("broken")
    bad["spec"]["allocatable"] = {"cpu": "lots"}
    shapes.seed(bad, w.shape("h100"))
    stores = stores_with(shapes)
    for _ in range(2):
        p = inputs.read_pass(stores)
        assert set(p.node_shapes) == {"h100"}
        assert len(p.shape_problems) == 1 and "broken" in p.shape_problems[0]
