"""The reconcile runtime on a fake clock: de-duplication, per-key serialization,
rate-limited retries, requeue-after, store events to keys, leader-only controllers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from prometheus_client import REGISTRY

from admission import clock
from admission.kube import client, kinds, store
from admission.runtime import workqueue


class Recording:
    """A controller that records when each key was reconciled (fake-clock seconds)."""

    name = "recording"
    leader_only = False
    watches = (kinds.WORKLOAD,)

    def __init__(self, clk: clock.FakeClock, script: dict[str, list[object]] | None = None
                 ) -> None:
        self.clk = clk
        self.calls: list[tuple[str, float]] = []
        self.script = script or {}  # per key: what successive reconciles do
        self.running: set[str] = set()
        self.overlap = False
        self.gate: asyncio.Event | None = None

    def keys(self, kind: kinds.Kind, event: client.WatchEvent, before: client.Obj | None
             ) -> Iterable[str]:
        if event.object["metadata"].get("labels", {}).get("ignore"):
            return ()
        return (workqueue.key_of(event.object),)

    async def reconcile(self, key: str) -> float | None:
        if key in self.running:
            self.overlap = True
        self.running.add(key)
        try:
            self.calls.append((key, self.clk.monotonic()))
            if self.gate is not None:
                await self.gate.wait()
            steps = self.script.get(key) or []
            step = steps.pop(0) if steps else None
            if isinstance(step, Exception):
                raise step
            return step  # type: ignore[return-value]
        finally:
            self.running.discard(key)


def _wl(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels,
                         "resourceVersion": "1"}}


def _setup(script: dict[str, list[object]] | None = None, leader_only: bool = False
           ) -> tuple[clock.FakeClock, store.Store, Recording, workqueue.Runtime]:
    clk = clock.FakeClock()
    s = store.Store(kinds.WORKLOAD)
    ctrl = Recording(clk, script)
    ctrl.leader_only = leader_only
    rt = workqueue.Runtime(lambda k: s, clock=clk,
                            retry=workqueue.Retry(base=0.5, maximum=4))
    rt.register(ctrl)
    return clk, s, ctrl, rt


async def test_existing_objects_are_offered_at_start_and_events_deduplicated() -> None:
    clk, s, ctrl, rt = _setup()
    s.seed(_wl("a"), _wl("skip", ignore="yes"))
    rt.start(leader_only=False)
    q = rt.queues["recording"]
    q.add("ns/a")
    q.add("ns/a")
    await clk.advance(0)
    assert ctrl.calls == [("ns/a", 0.0)]
    s.seed(_wl("b"))
    s.seed(_wl("b"))
    await clk.advance(1)
    assert ctrl.calls == [("ns/a", 0.0), ("ns/b", 0.0)]
    await rt.stop()


async def test_a_key_is_never_reconciled_twice_at_once_and_an_event_meanwhile_requeues_it(
) -> None:
    clk, s, ctrl, rt = _setup()
    rt.start(leader_only=False)
    ctrl.gate = asyncio.Event()
    s.seed(_wl("a"))
    await clk.advance(0)
    assert len(ctrl.calls) == 1
    s.seed(_wl("a", x="1"))
    s.seed(_wl("a", x="2"))
    await clk.advance(1)
    assert len(ctrl.calls) == 1  # still running the first one
    ctrl.gate.set()
    await clk.advance(1)
    assert [k for k, _ in ctrl.calls] == ["ns/a", "ns/a"]  # once more, not twice
    assert not ctrl.overlap
    await rt.stop()


async def test_exceptions_retry_with_exponential_backoff_then_reset() -> None:
    clk, s, ctrl, rt = _setup({"ns/a": [RuntimeError("boom"), RuntimeError("boom"),
                                        RuntimeError("boom"), None]})
    rt.start(leader_only=False)
    s.seed(_wl("a"))
    await clk.advance(10, step=0.25)
    assert [t for _, t in ctrl.calls] == [0.0, 0.5, 1.5, 3.5]
    assert rt.queues["recording"].failures == {}
    await rt.stop()


async def test_retry_delay_is_bounded() -> None:
    r = workqueue.Retry(base=0.5, maximum=4)
    assert [r.delay(n) for n in (1, 2, 3, 4, 10)] == [0.5, 1, 2, 4, 4]


async def test_requeue_after_calls_again_when_asked() -> None:
    clk, s, ctrl, rt = _setup({"ns/a": [30.0, None]})
    rt.start(leader_only=False)
    s.seed(_wl("a"))
    await clk.advance(29)
    assert len(ctrl.calls) == 1
    await clk.advance(2)
    assert ctrl.calls == [("ns/a", 0.0), ("ns/a", 30.0)]
    await clk.advance(100)
    assert len(ctrl.calls) == 2
    await rt.stop()


async def test_an_event_before_a_requeue_is_due_runs_now_once() -> None:
    clk, s, ctrl, rt = _setup({"ns/a": [30.0, None]})
    rt.start(leader_only=False)
    s.seed(_wl("a"))
    await clk.advance(5)
    s.seed(_wl("a", changed="yes"))
    await clk.advance(40)
    assert ctrl.calls == [("ns/a", 0.0), ("ns/a", 5.0)]
    await rt.stop()


async def test_leader_only_controllers_start_with_leadership_and_stop_without() -> None:
    clk, s, ctrl, rt = _setup(leader_only=True)
    s.seed(_wl("a"))
    rt.start(leader_only=False)
    await clk.advance(1)
    assert ctrl.calls == []  # not leading: nothing runs, events are not queued
    s.seed(_wl("b"))
    rt.start(leader_only=True)
    await clk.advance(1)
    assert sorted(k for k, _ in ctrl.calls) == ["ns/a", "ns/b"]
    await rt.stop(leader_only=True)
    s.seed(_wl("c"))
    await clk.advance(1)
    assert len(ctrl.calls) == 2
    await rt.stop()


async def test_a_failing_key_does_not_hold_back_others() -> None:
    clk, s, ctrl, rt = _setup({"ns/bad": [RuntimeError("x")] * 5})
    rt.start(leader_only=False)
    s.seed(_wl("bad"), _wl("good"))
    await clk.advance(0)
    assert ("ns/good", 0.0) in ctrl.calls
    await rt.stop()


def test_keys_round_trip() -> None:
    assert workqueue.key_of({"metadata": {"name": "n", "namespace": "ns"}}) == "ns/n"
    assert workqueue.split("ns/n") == ("ns", "n")
    assert workqueue.split("cluster-scoped") == (None, "cluster-scoped")


async def test_a_stale_earlier_entry_does_not_run_a_key_before_its_due_time() -> None:
    clk, _s, ctrl, rt = _setup({"ns/a": [None, None, None]})
    rt.start(leader_only=False)
    q = rt.queues["recording"]
    q.add("ns/a", 30)
    q.add("ns/a", 5)  # earlier wins; the entry at 30 is now stale
    await clk.advance(6)
    assert [t for _, t in ctrl.calls] == [5.0]
    q.add("ns/a", 35)  # due at 41: the stale entry at 30 must not run it
    await clk.advance(30)
    assert [t for _, t in ctrl.calls] == [5.0]
    await clk.advance(10)
    assert [t for _, t in ctrl.calls] == [5.0, 41.0]
    await rt.stop()


async def test_queue_wait_is_the_time_a_due_key_waits_for_a_worker() -> None:
    """One worker busy 5 s with `a`: `b`, due at 0, waits 5 s; `c`'s requeue-after delay
    is not a wait (it starts when due, with a free worker)."""
    clk = clock.FakeClock()
    s = store.Store(kinds.WORKLOAD)
    ctrl = Recording(clk, {"ns/c": [3.0, None]})
    ctrl.name = "recording-wait"  # type: ignore[misc]  # its own metric series
    rt = workqueue.Runtime(lambda k: s, clock=clk, workers=1)
    rt.register(ctrl)
    rt.start(leader_only=False)

    def waits() -> tuple[float, float]:
        count = REGISTRY.get_sample_value("fitgate_workqueue_wait_seconds_count",
                                          {"controller": "recording-wait"}) or 0.0
        total = REGISTRY.get_sample_value("fitgate_workqueue_wait_seconds_sum",
                                          {"controller": "recording-wait"}) or 0.0
        return count, total

    before = waits()
    ctrl.gate = asyncio.Event()
    s.seed(_wl("a"))
    await clk.advance(0)
    s.seed(_wl("b"))
    await clk.advance(5)
    assert [k for k, _ in ctrl.calls] == ["ns/a"]
    ctrl.gate.set()
    await clk.advance(0)
    assert ctrl.calls == [("ns/a", 0.0), ("ns/b", 5.0)]
    count, total = waits()
    assert (count - before[0], total - before[1]) == (2, 5.0)
    s.seed(_wl("c"))
    await clk.advance(10)
    assert [t for k, t in ctrl.calls if k == "ns/c"] == [5.0, 8.0]
    count, total = waits()
    assert (count - before[0], total - before[1]) == (4, 5.0)
    await rt.stop()
