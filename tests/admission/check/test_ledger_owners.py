"""`NodeLedger.node_owners` reads only the requests created at or before the newest
node (`ledgerindex.Requests`): the owners equal those of every request read, and the
Workload's own requests (`requests_of`) those of the whole namespace filtered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from admission import constants as c
from admission.check import capacity, ledgerindex
from admission.kube import kinds
from tests.admission import world as w

LATER = "2026-01-01T00:10:00Z"  # after the NEW nodes


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


_CREATED_UNTIL = ledgerindex.Requests.created_until


def every_request(index: ledgerindex.Requests, time: Any) -> list[dict[str, Any]]:
    """What `created_until` narrows: every request, oldest first."""
    return _CREATED_UNTIL(index, ledgerindex.created_at("9999-01-01T00:00:00Z"))


async def test_requests_newer_than_every_node_are_not_read_and_own_nothing(
        world: w.World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)))
    await world.reconcile()  # train asks at 00:00
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"))
    world.api.creation_time = LATER  # other asks after the node came
    world.seed(w.admitted(w.workers(2), name="other"))
    await world.reconcile(name="other")
    assert world.request_names() == ["other-fitgate-1", "train-fitgate-1"]
    r = world.reconciler()
    shapes = r.this_pass().node_shapes
    narrowed = r.ledger.node_owners(shapes)
    assert [str(o["metadata"]["name"]) for o in r.ledger._requests.created_until(
        r.ledger._nodes.newest() or ledgerindex.UNKNOWN)] == ["train-fitgate-1"]
    assert set(narrowed) == {"h100-a"}
    assert narrowed["h100-a"][0] == "train-fitgate-1"
    monkeypatch.setattr(ledgerindex.Requests, "created_until", every_request)
    assert r.ledger.node_owners(shapes) == narrowed


async def test_a_workloads_requests_are_those_labelled_with_its_uid(world: w.World) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(2)),
               w.admitted(w.workers(2), name="other"))
    await world.reconcile()
    await world.reconcile(name="other")
    r = world.reconciler()
    for name in ("train", "other"):
        wl = world.workload(name)
        got = capacity.requests_of(r, wl)
        assert [o["metadata"]["name"] for o in got] == [f"{name}-fitgate-1"]
        uid = wl["metadata"]["uid"]
        assert all(o["metadata"]["labels"][c.WORKLOAD_UID_LABEL] == uid for o in got)
    assert len(world.api.objects(kinds.PROVISIONING_REQUEST)) == 2
