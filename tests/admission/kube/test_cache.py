"""Informers over the project's FakeClient: initial list, live events, 410 Gone → relist
with exactly the differences, outages → reconnect, deletes during an outage, kinds the
server does not serve."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import structlog.testing

from admission.kube import cache, client, compact, errors, fake, kinds, store
from tests.admission import waits

FAST = cache.Backoff(base=0.001, ceiling=0.01, jitter=0)


def _node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


async def _until(pred: Callable[[], object], what: str, timeout: float = 2.0) -> None:
    await waits.until(pred, what, timeout, interval=0.001)


class Recorder:
    def __init__(self, s: store.Store) -> None:
        self.events: list[tuple[str, str]] = []
        s.subscribe(self)

    def __call__(self, ev: client.WatchEvent, before: client.Obj | None) -> None:
        self.events.append((ev.type, ev.object["metadata"]["name"]))


async def _running(c: fake.FakeClient, spec: cache.Spec,
                   ) -> tuple[cache.Informer, Recorder, asyncio.Task[None]]:
    inf = cache.Informer(c, spec, backoff=FAST)
    rec = Recorder(inf.store)
    task = asyncio.create_task(inf.run())
    await asyncio.wait_for(inf.synced.wait(), 2)
    return inf, rec, task


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_initial_list_then_live_events() -> None:
    c = fake.FakeClient()
    c.seed(kinds.NODE, _node("a"))
    c.seed(kinds.NODE, _node("b"))
    inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    assert sorted(rec.events) == [("ADDED", "a"), ("ADDED", "b")]
    c.seed(kinds.NODE, _node("a", zone="z1"))
    c.remove(kinds.NODE, "b")
    c.seed(kinds.NODE, _node("c"))
    await _until(lambda: len(rec.events) == 5, "three live events")
    assert rec.events[2:] == [("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]
    assert inf.store.get("a")["metadata"]["labels"] == {"zone": "z1"}
    assert sorted(o["metadata"]["name"] for o in inf.store.list()) == ["a", "c"]
    await _stop(task)


async def test_closed_watch_resumes_without_relist_or_duplicates() -> None:
    c = fake.FakeClient()
    c.seed(kinds.NODE, _node("a"))
    inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    c.close_watches()
    await asyncio.sleep(0.01)
    c.seed(kinds.NODE, _node("b"))
    await _until(lambda: ("ADDED", "b") in rec.events, "b after reconnect")
    await asyncio.sleep(0.01)
    assert rec.events == [("ADDED", "a"), ("ADDED", "b")]
    assert inf.lists == 1
    await _stop(task)


async def test_gone_relists_and_tells_exactly_the_differences() -> None:
    c = fake.FakeClient()
    for n in "abcd":
        c.seed(kinds.NODE, _node(n))
    inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    # Changes happen while the watch is away, then history is compacted: the next watch
    # from the old resourceVersion gets 410 Gone.
    c.fail_next(errors.ApiError(0, "Unreachable", "connection refused"), verb="watch",
                kind=kinds.NODE, times=3)
    c.close_watches()
    c.seed(kinds.NODE, _node("a", zone="z2"))  # changed
    c.remove(kinds.NODE, "b")  # deleted during the outage
    c.seed(kinds.NODE, _node("e"))  # added
    with structlog.testing.capture_logs() as logs:
        c.compact()
        await _until(lambda: inf.lists == 2, "the relist after Gone")
    # The log says both, so an e2e test (and an operator) can see a relist happen.
    said = [(x["event"], x.get("kind")) for x in logs]
    assert ("informer.gone", "Node") in said
    (relisted,) = [x for x in logs if x["event"] == "informer.relisted"]
    assert relisted["objects"] == 4 and relisted["resource_version"]
    await _until(lambda: len(rec.events) == 7, "the differences")
    assert sorted(rec.events[4:]) == [("ADDED", "e"), ("DELETED", "b"), ("MODIFIED", "a")]
    assert sorted(o["metadata"]["name"] for o in inf.store.list()) == ["a", "c", "d", "e"]
    # And live events keep flowing after the relist.
    c.seed(kinds.NODE, _node("f"))
    await _until(lambda: ("ADDED", "f") in rec.events, "f after relist")
    assert len(rec.events) == 8
    await _stop(task)


async def test_outage_reconnects_and_sees_deletes_made_meanwhile() -> None:
    c = fake.FakeClient()
    c.seed(kinds.NODE, _node("a"))
    c.seed(kinds.NODE, _node("b"))
    inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    c.fail_next(errors.ApiError(503, "ServiceUnavailable", "apiserver restarting"),
                verb="watch", kind=kinds.NODE, times=4)
    c.close_watches()
    c.remove(kinds.NODE, "a")
    await _until(lambda: ("DELETED", "a") in rec.events, "the delete made during the outage")
    assert inf.lists == 1  # history was kept: no relist needed
    assert rec.events.count(("DELETED", "a")) == 1
    assert inf.problem is None
    assert len(c.verbs("watch", kinds.NODE)) >= 5
    await _stop(task)


async def test_list_outage_backs_off_then_syncs() -> None:
    c = fake.FakeClient()
    c.seed(kinds.NODE, _node("a"))
    c.fail_next(errors.ApiError(0, "Unreachable", "no route"), verb="list", times=3)
    inf = cache.Informer(c, cache.Spec(kinds.NODE), backoff=FAST)
    task = asyncio.create_task(inf.run())
    await asyncio.wait_for(inf.synced.wait(), 2)
    assert len(c.verbs("list")) == 4
    assert inf.problem is None
    await _stop(task)


def test_backoff_is_exponential_and_bounded() -> None:
    b = cache.Backoff(base=0.5, ceiling=4, jitter=0)
    assert [b.delay(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]


async def test_unserved_optional_kind_is_reported_not_fatal_and_picked_up_later() -> None:
    c = fake.FakeClient()
    c.seed(kinds.NODE, _node("a"))
    c.fail_next(errors.NotFound("the server could not find the requested resource"),
                verb="list", kind=kinds.PROVISIONING_REQUEST, times=2)
    infs = cache.Informers(c, [cache.Spec(kinds.NODE),
                               cache.Spec(kinds.PROVISIONING_REQUEST, optional=True)],
                           backoff=cache.Backoff(base=0.001, ceiling=0.05, jitter=0))
    infs.start()
    assert await infs.wait_ready(2)
    status = infs.status()
    assert status["Node"] == "synced"
    if status["ProvisioningRequest"] != "synced":  # still between retries
        assert "not served" in status["ProvisioningRequest"]
        assert status["ProvisioningRequest"].startswith("optional, ")
    await _until(lambda: infs.status()["ProvisioningRequest"] == "synced",
                 "the CRD installed later")
    await infs.stop()


async def test_unserved_required_kind_holds_readiness() -> None:
    c = fake.FakeClient()
    c.fail_next(errors.NotFound("not found"), verb="list", kind=kinds.WORKLOAD, times=100)
    infs = cache.Informers(c, [cache.Spec(kinds.NODE), cache.Spec(kinds.WORKLOAD)],
                           backoff=cache.Backoff(base=0.001, ceiling=0.01, jitter=0))
    infs.start()
    assert not await infs.wait_ready(0.2)
    assert "not served" in infs.status()["Workload"]
    assert infs.status()["Node"] == "synced"
    await infs.stop()


async def test_label_selected_kind_caches_only_matching_objects() -> None:
    c = fake.FakeClient()
    mine = {"metadata": {"name": "t1", "namespace": "ns",
                         "labels": {"app.kubernetes.io/managed-by": "fitgate"}}}
    c.seed(kinds.POD_TEMPLATE, mine)
    c.seed(kinds.POD_TEMPLATE, {"metadata": {"name": "other", "namespace": "ns"}})
    _inf, rec, task = await _running(
        c, cache.Spec(kinds.POD_TEMPLATE, label_selector=cache.POD_TEMPLATE_SELECTOR))
    c.seed(kinds.POD_TEMPLATE, {"metadata": {"name": "other2", "namespace": "ns"}})
    c.seed(kinds.POD_TEMPLATE, {**mine, "metadata": {**mine["metadata"], "name": "t2"}})
    await _until(lambda: ("ADDED", "t2") in rec.events, "t2")
    assert rec.events == [("ADDED", "t1"), ("ADDED", "t2")]
    await _stop(task)


async def test_bookmarks_advance_the_resource_version_without_touching_the_store() -> None:
    class Bookmarking(fake.FakeClient):
        async def watch(self, kind, resource_version, namespace=None,  # type: ignore[override]
                        label_selector=None):
            self.watched_from = resource_version
            yield client.WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "999"}})
            async for ev in super().watch(kind, resource_version, namespace, label_selector):
                yield ev

    c = Bookmarking()
    c.seed(kinds.NODE, _node("a"))
    _inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    await _until(lambda: getattr(c, "watched_from", None) is not None, "the watch")
    c.close_watches()
    await _until(lambda: c.watched_from == "999", "a watch from the bookmark")
    assert rec.events == [("ADDED", "a")]
    await _stop(task)




async def test_managed_fields_are_not_cached() -> None:
    c = fake.FakeClient()
    mf = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    c.seed(kinds.NODE, {"metadata": {"name": "a", "managedFields": mf}})
    inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    c.seed(kinds.NODE, {"metadata": {"name": "b", "managedFields": mf}})
    await _until(lambda: ("ADDED", "b") in rec.events, "b")
    assert all("managedFields" not in o["metadata"] for o in inf.store.list())
    assert c.find(kinds.NODE, "a")["metadata"]["managedFields"] == mf  # (only the cache)
    await _stop(task)


async def test_listed_and_watched_objects_are_cached_compact() -> None:
    """What the store holds is `compact.compact` of what the server sent, listed or
    watched (the Node status nobody reads is gone, the rest equal)."""
    c = fake.FakeClient()
    full = {"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "8"},
                                                   "images": [{"names": ["x"]}]}}
    c.seed(kinds.NODE, full)
    inf, rec, task = await _running(c, cache.Spec(kinds.NODE))
    c.seed(kinds.NODE, {**full, "metadata": {"name": "b"}})
    await _until(lambda: ("ADDED", "b") in rec.events, "b")
    for name in "ab":
        got = inf.store.get(name)
        assert got is not None and got == compact.compact(c.find(kinds.NODE, name))
        assert got["status"] == {"allocatable": {"cpu": "8"}}
    await _stop(task)


async def test_watches_that_close_at_once_back_off_instead_of_spinning() -> None:
    class Cutting(fake.FakeClient):
        async def watch(self, kind, resource_version, namespace=None,  # type: ignore[override]
                        label_selector=None):
            self.watches = getattr(self, "watches", 0) + 1
            return
            yield  # (an async generator that ends at once)

    c = Cutting()
    c.seed(kinds.NODE, _node("a"))
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)
        await asyncio.sleep(0)

    inf = cache.Informer(c, cache.Spec(kinds.NODE),
                         backoff=cache.Backoff(base=0.5, ceiling=8, jitter=0), sleep=sleep)
    task = asyncio.create_task(inf.run())
    await _until(lambda: len(slept) >= 6, "six back-offs")
    await _stop(task)
    assert slept[:6] == [0.5, 1, 2, 4, 8, 8]
    assert c.watches <= len(slept) + 1


async def test_a_burst_of_events_is_applied_in_steps_that_let_others_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Events a watch has buffered are applied without suspending; past `STEP_SECONDS`
    the informer yields, so other tasks run between the events of a burst, and every
    event is still applied once, in order."""
    monkeypatch.setattr(cache, "STEP_SECONDS", 0.0)  # yield after every event
    c = fake.FakeClient()
    _, rec, task = await _running(c, cache.Spec(kinds.NODE))
    seen_between: list[int] = []

    async def other() -> None:
        while len(rec.events) < 50:
            seen_between.append(len(rec.events))
            await asyncio.sleep(0)
    for i in range(50):  # buffered at once, before the informer runs again
        c.seed(kinds.NODE, _node(f"n{i:02d}"))
    await asyncio.wait_for(other(), 2)
    assert rec.events == [("ADDED", f"n{i:02d}") for i in range(50)]
    assert any(0 < n < 50 for n in seen_between)  # ran in the middle of the burst
    await _stop(task)
