"""NodeShape status (admission/engine/shapestatus.py): the Valid condition, the Event on a
shape fitgate refuses, the count of existing nodes, and no write when nothing changed."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from admission import clock
from admission.engine import shapestatus
from admission.kube import client, fake, kinds, store
from tests.admission import crd
from tests.gang import builders as gb

T0 = datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)
SHAPE_LABEL = "node.example.com/shape"


def _edit(change: Callable[[dict[str, Any]], None], name: str = "h100") -> dict[str, Any]:
    shape = gb.shape(name)
    change(shape["spec"])
    return shape


def _device(spec: dict[str, Any]) -> dict[str, Any]:
    device: dict[str, Any] = spec["resourceSlices"][0]["devices"][0]
    return device


# (what is wrong, the shape, the field the message must name): shapes the CRD's schema
# lets through and fitgate's engine refuses.
INVALID = [
    ("attribute name", _edit(lambda s: _device(s).setdefault("attributes", {}).update(
        {"bad name!": {"string": "x"}})), "spec.resourceSlices[0].devices[0].attributes"),
    ("device taint effect", _edit(lambda s: _device(s).update(
        taints=[{"key": "k", "effect": "Sometimes"}])),
     "spec.resourceSlices[0].devices[0].taints[0].effect"),
    ("unknown field", _edit(lambda s: s.update(nodeLabel={"typo": "x"})), "spec.nodeLabel"),
]


class World:
    def __init__(self, *objs: tuple[kinds.Kind, dict[str, Any]], karpenter: bool = False
                 ) -> None:
        self.api = fake.FakeClient()
        self.clock = clock.FakeClock(T0)
        self.shapes = store.Store(kinds.NODE_SHAPE)
        self.nodes = store.Store(kinds.NODE)
        for kind, obj in objs:
            self.seed(kind, obj)
        self.ctl = shapestatus.ShapeStatusController(
            self.api, self.shapes, self.nodes, clock=self.clock, karpenter=karpenter)

    def seed(self, kind: kinds.Kind, obj: dict[str, Any]) -> client.Obj:
        stored = self.api.seed(kind, obj)
        (self.shapes if kind == kinds.NODE_SHAPE else self.nodes).seed(stored)
        return stored

    def remove_node(self, name: str) -> None:
        self.api.remove(kinds.NODE, name)
        gone = self.nodes.get(name)
        assert gone is not None
        self.nodes.apply(client.WatchEvent("DELETED", gone))

    async def sync(self, name: str) -> client.Obj:
        """Reconcile the shape, then read it back into the store (as the watch would)."""
        assert await self.ctl.reconcile(name) is None
        obj = self.api.find(kinds.NODE_SHAPE, name)
        assert obj is not None
        self.shapes.seed(obj)
        return obj

    def events(self) -> list[dict[str, Any]]:
        return [c.body for c in self.api.verbs("create", kinds.EVENT)]

    def status_patches(self) -> int:
        return len(self.api.verbs("patch", kinds.NODE_SHAPE))


def _node(name: str, shape: str | None) -> dict[str, Any]:
    node: dict[str, Any] = gb.node(name)
    if shape is not None:
        node["metadata"].setdefault("labels", {})[SHAPE_LABEL] = shape
    return node


def _valid(obj: client.Obj) -> dict[str, Any]:
    [cond] = [c for c in obj["status"]["conditions"] if c["type"] == "Valid"]
    return dict(cond)


async def test_a_valid_shape_says_so_and_counts_its_nodes() -> None:
    w = World((kinds.NODE_SHAPE, gb.shape("h100")), (kinds.NODE, _node("a", "h100")),
              (kinds.NODE, _node("b", "h100")), (kinds.NODE, _node("c", "a100")))
    obj = await w.sync("h100")
    assert _valid(obj) == {"type": "Valid", "status": "True", "reason": "Valid",
                           "message": "fitgate plans with this shape",
                           "lastTransitionTime": "2026-12-03T00:00:00Z"}
    assert obj["status"]["nodes"] == 2
    assert obj["status"]["observedGeneration"] == 1
    assert w.events() == []
    status = crd.schema(crd.load("nodeshapes.fitgate.io"))["properties"]["status"]
    assert crd.check(status, obj["status"], ".status") == []


@pytest.mark.parametrize(("what", "shape", "field"), INVALID, ids=[i[0] for i in INVALID])
async def test_a_shape_fitgate_refuses_says_why_in_its_status_and_an_event(
        what: str, shape: dict[str, Any], field: str) -> None:
    w = World((kinds.NODE_SHAPE, copy.deepcopy(shape)), (kinds.NODE, _node("a", "h100")))
    obj = await w.sync("h100")
    cond = _valid(obj)
    assert cond["status"] == "False" and cond["reason"] == "Invalid"
    assert field in cond["message"], cond["message"]
    assert cond["message"].startswith("NodeShape h100: ")
    assert obj["status"]["nodes"] == 1
    [event] = w.events()
    assert event["type"] == "Warning" and event["reason"] == "InvalidShape"
    assert event["regarding"]["kind"] == "NodeShape" and event["regarding"]["name"] == "h100"
    assert field in event["note"]
    status = crd.schema(crd.load("nodeshapes.fitgate.io"))["properties"]["status"]
    assert crd.check(status, obj["status"], ".status") == []


async def test_nothing_is_written_again_until_something_changes() -> None:
    bad = INVALID[0][1]
    w = World((kinds.NODE_SHAPE, gb.shape("h100")), (kinds.NODE, _node("a", "h100")))
    w.seed(kinds.NODE_SHAPE, {**copy.deepcopy(bad), "metadata": {"name": "bad"}})
    await w.sync("h100")
    await w.sync("bad")
    patches, events = w.status_patches(), len(w.events())
    await w.clock.advance(60)
    for _ in range(3):
        await w.sync("h100")
        await w.sync("bad")
    assert w.status_patches() == patches and len(w.events()) == events
    # A node of the shape comes: the count changes, the condition keeps its time.
    w.seed(kinds.NODE, _node("b", "h100"))
    obj = await w.sync("h100")
    assert obj["status"]["nodes"] == 2
    assert _valid(obj)["lastTransitionTime"] == "2026-12-03T00:00:00Z"
    assert w.status_patches() == patches + 1 and len(w.events()) == events


async def test_fixing_a_shape_turns_it_valid_and_breaking_it_warns_again() -> None:
    w = World((kinds.NODE_SHAPE, copy.deepcopy(INVALID[1][1])))
    first = await w.sync("h100")
    assert _valid(first)["status"] == "False" and len(w.events()) == 1
    await w.clock.advance(30)
    fixed = w.seed(kinds.NODE_SHAPE, gb.shape("h100"))
    assert fixed["metadata"]["generation"] == 2
    obj = await w.sync("h100")
    assert _valid(obj)["status"] == "True"
    assert _valid(obj)["lastTransitionTime"] == "2026-12-03T00:00:30Z"
    assert obj["status"]["observedGeneration"] == 2
    assert len(w.events()) == 1  # no Warning for a valid shape
    w.seed(kinds.NODE_SHAPE, copy.deepcopy(INVALID[0][1]))
    obj = await w.sync("h100")
    assert _valid(obj)["status"] == "False" and len(w.events()) == 2


async def test_a_karpenter_shape_is_invalid_where_fitgate_does_not_serve_karpenter() -> None:
    shape = _edit(lambda s: s.update(provisioning={"karpenter": {"nodePool": "gpu"}}))
    off = World((kinds.NODE_SHAPE, copy.deepcopy(shape)))
    cond = _valid(await off.sync("h100"))
    assert cond["status"] == "False" and cond["reason"] == "KarpenterNotServed"
    assert "spec.provisioning.karpenter" in cond["message"] and "karpenter" in off.events()[0][
        "note"]
    on = World((kinds.NODE_SHAPE, copy.deepcopy(shape)), karpenter=True)
    assert _valid(await on.sync("h100"))["status"] == "True"


async def test_other_conditions_are_kept() -> None:
    shape = gb.shape("h100")
    shape["status"] = {"conditions": [{"type": "Other", "status": "True", "reason": "X"}]}
    w = World((kinds.NODE_SHAPE, shape))
    obj = await w.sync("h100")
    assert [c["type"] for c in obj["status"]["conditions"]] == ["Other", "Valid"]


def test_node_events_queue_the_shapes_a_node_joins_or_leaves() -> None:
    w = World((kinds.NODE_SHAPE, gb.shape("h100")), (kinds.NODE_SHAPE, gb.shape("a100")))
    ctl = w.ctl
    a = _node("a", "h100")

    def keys(etype: client.EventType, obj: dict[str, Any], before: dict[str, Any] | None
             ) -> list[str]:
        return sorted(ctl.keys(kinds.NODE, client.WatchEvent(etype, obj), before))

    assert keys("ADDED", a, None) == ["h100"]
    assert keys("DELETED", a, None) == ["h100"]
    heartbeat = copy.deepcopy(a)
    heartbeat["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert keys("MODIFIED", heartbeat, a) == []
    assert keys("MODIFIED", _node("a", "a100"), a) == ["a100", "h100"]
    assert keys("ADDED", _node("x", None), None) == []


async def test_a_deleted_node_is_counted_out() -> None:
    w = World((kinds.NODE_SHAPE, gb.shape("h100")), (kinds.NODE, _node("a", "h100")),
              (kinds.NODE, _node("b", "h100")))
    assert (await w.sync("h100"))["status"]["nodes"] == 2
    w.remove_node("a")
    assert (await w.sync("h100"))["status"]["nodes"] == 1


async def test_a_deleted_shape_is_left_alone() -> None:
    w = World()
    assert await w.ctl.reconcile("gone") is None
    assert w.status_patches() == 0


async def test_the_spec_is_read_once_per_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = shapestatus.desired

    def counted(obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        reads.append(obj["metadata"]["name"])
        return real(obj, **kw)
    monkeypatch.setattr(shapestatus, "desired", counted)
    w = World((kinds.NODE_SHAPE, gb.shape("h100")))
    await w.sync("h100")  # reads it, writes the status (a new resourceVersion)
    for i in range(3):
        w.seed(kinds.NODE, _node(f"n{i}", "h100"))
        await w.sync("h100")
    assert reads == ["h100"]
    w.seed(kinds.NODE_SHAPE, gb.shape("h100", price=11))  # a new generation
    await w.sync("h100")
    assert reads == ["h100", "h100"]


def test_serve_runs_it_on_the_leader_with_the_version_and_karpenter_it_follows() -> None:
    from admission import config
    from admission.app import components, serve

    cfg = config.load(env={}, flags={"leader_election": False, "kube_version": "1.36",
                                     "karpenter": True})
    svc = serve.Service(cfg, fake.FakeClient(), factories=components.factories())
    [ctl] = [q.ctrl for q in svc.runtime.queues.values()
             if isinstance(q.ctrl, shapestatus.ShapeStatusController)]
    assert ctl.leader_only and (ctl.kube_version, ctl.karpenter) == ("1.36", True)
    svc.inventory.close()
