"""`bench.cpusplit`: sampled stacks sorted into parts, each thread's CPU divided as its
samples, the waits after a wake-up left out of the division."""

from __future__ import annotations

import pytest

from bench import cpusplit

LOOP = ("thread:MainThread", "bench/controller.py:main", "asyncio/base_events.py:_run_once",
        "asyncio/events.py:_run")
DECIDE = ("thread:fitgate-decide_0", "concurrent/futures/thread.py:_worker")


@pytest.mark.parametrize(("stack", "part"), [
    ((*DECIDE, "engine/inventory.py:_decide", "fitcore/plan.py:plan"), "engine decisions"),
    ((*DECIDE, "engine/inventory.py:_drain", "fitcore/inventory.py:apply"),
     "engine event application"),
    ((*DECIDE, "runtime/handoff.py:post", "asyncio/selector_events.py:_write_to_self"),
     "waiting"),
    ((*DECIDE, "fitcore/inventory.py:_decide", "bench/loopwatch.py:_gc"),
     "garbage collection"),
    ((*LOOP, "runtime/workqueue.py:_one", "check/workload.py:reconcile",
      "check/ledger.py:node_owners"), "check reconciler"),
    ((*LOOP, "runtime/workqueue.py:_one", "check/workload.py:reconcile",
      "bench/controller.py:apply", "kube/fake.py:apply"), "fake API server and bench"),
    ((*LOOP, "runtime/workqueue.py:_one", "release/reconciler.py:reconcile"),
     "release reconciler"),
    ((*LOOP, "kube/cache.py:run", "kube/store.py:apply"), "event application on the loop"),
    ((*LOOP[:3], "asyncio/selector_events.py:_read_from_self"), "waiting"),
    (("thread:sampler", "bench/controller.py:run"), None),
], ids=lambda x: x if isinstance(x, str) else None)
def test_parts(stack: tuple[str, ...], part: str | None) -> None:
    assert cpusplit.part(stack) == part


def test_a_threads_cpu_is_divided_as_its_working_samples() -> None:
    stacks = {
        (*DECIDE, "engine/inventory.py:_decide"): 3,
        (*DECIDE, "engine/inventory.py:_drain"): 1,
        (*DECIDE, "asyncio/selector_events.py:_write_to_self"): 4,  # not divided
        (*LOOP, "kube/cache.py:run"): 1,
    }
    got = cpusplit.split(stacks, {"fitgate-decide": 8.0, "event loop": 2.0})
    assert got["engine decisions"] == pytest.approx(6.0)
    assert got["engine event application"] == pytest.approx(2.0)
    assert got["event application on the loop"] == pytest.approx(2.0)
    assert sum(got.values()) == pytest.approx(10.0)
    assert cpusplit.waiting(stacks) == pytest.approx(4 / 9)
