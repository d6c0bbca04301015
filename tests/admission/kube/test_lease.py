"""Leader election with the project's FakeClient and a fake clock: acquire, renew, a second
replica waits, takeover after expiry, loss on renew failure, release on shutdown."""

from __future__ import annotations

import asyncio

import pytest

from admission import clock
from admission.kube import errors, fake, kinds, lease


def _elector(c: fake.FakeClient, clk: clock.FakeClock, who: str) -> lease.Elector:
    return lease.Elector(c, name="fitgate", namespace="fitgate-system", identity=who,
                         lease_duration=15, renew_deadline=10, retry_period=2, clock=clk)


def _lease(c: fake.FakeClient) -> dict:
    found = c.find(kinds.LEASE, "fitgate", "fitgate-system")
    assert found is not None
    return found["spec"]


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_acquire_creates_the_lease_and_renews_it() -> None:
    c, clk = fake.FakeClient(), clock.FakeClock()
    a = _elector(c, clk, "a")
    task = asyncio.create_task(a.run())
    await clk.advance(0)
    assert a.is_leader
    first = _lease(c)
    assert first["holderIdentity"] == "a"
    assert first["leaseDurationSeconds"] == 15
    assert first["acquireTime"] == first["renewTime"] == "2026-01-01T00:00:00.000000Z"
    await clk.advance(4)
    renewed = _lease(c)
    assert renewed["renewTime"] == "2026-01-01T00:00:04.000000Z"
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["leaseTransitions"] == 0
    await _stop(task)


async def test_second_replica_follows_until_the_leader_stops_renewing() -> None:
    c, clk = fake.FakeClient(), clock.FakeClock()
    a, b = _elector(c, clk, "a"), _elector(c, clk, "b")
    ta = asyncio.create_task(a.run())
    await clk.advance(0)
    tb = asyncio.create_task(b.run())
    await clk.advance(20)
    assert a.is_leader and not b.is_leader
    # a dies without releasing (a crash): b takes over once the lease expires, as b
    # observes it, not before.
    ta.cancel()
    c.fail_next(errors.ApiError(0, "Unreachable", "crashed"), verb="get", kind=kinds.LEASE)
    await asyncio.gather(ta, return_exceptions=True)
    await clk.advance(12)
    assert not b.is_leader
    await clk.advance(6)
    assert b.is_leader
    spec = _lease(c)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    await _stop(tb)


async def test_renew_failures_past_the_deadline_lose_leadership_then_regain() -> None:
    c, clk = fake.FakeClient(), clock.FakeClock()
    a = _elector(c, clk, "a")
    task = asyncio.create_task(a.run())
    await clk.advance(0)
    assert a.is_leader
    c.fail_next(errors.ApiError(0, "Unreachable", "apiserver down"), kind=kinds.LEASE,
                times=6)
    await clk.advance(8)
    assert a.is_leader  # 8 s without renewal: within the 10 s deadline
    await clk.advance(2)
    assert not a.is_leader and a.lost.is_set()
    await clk.advance(4)  # the API is back
    assert a.is_leader and not a.lost.is_set()
    assert a.transitions == 2
    await _stop(task)


async def test_another_holder_taking_over_is_seen_as_loss_at_once() -> None:
    c, clk = fake.FakeClient(), clock.FakeClock()
    a = _elector(c, clk, "a")
    task = asyncio.create_task(a.run())
    await clk.advance(0)
    spec = _lease(c)
    found = c.find(kinds.LEASE, "fitgate", "fitgate-system")
    assert found is not None
    c.seed(kinds.LEASE, {**found, "spec": {**spec, "holderIdentity": "intruder"}})
    await clk.advance(2)
    assert not a.is_leader
    await _stop(task)


async def test_release_on_shutdown_lets_the_next_replica_take_over_at_once() -> None:
    c, clk = fake.FakeClient(), clock.FakeClock()
    a, b = _elector(c, clk, "a"), _elector(c, clk, "b")
    ta = asyncio.create_task(a.run())
    await clk.advance(0)
    tb = asyncio.create_task(b.run())
    await clk.advance(2)
    await _stop(ta)
    assert _lease(c)["holderIdentity"] == ""
    assert not a.is_leader
    await clk.advance(2)
    assert b.is_leader
    await _stop(tb)
    assert _lease(c)["holderIdentity"] == ""


async def test_racing_replicas_one_wins() -> None:
    c, clk = fake.FakeClient(), clock.FakeClock()
    es = [_elector(c, clk, f"r{i}") for i in range(3)]
    tasks = [asyncio.create_task(e.run()) for e in es]
    await clk.advance(10)
    assert sum(e.is_leader for e in es) == 1
    for t in tasks:
        await _stop(t)


def test_bad_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        lease.Elector(fake.FakeClient(), name="l", namespace="n", identity="a",
                      lease_duration=5, renew_deadline=10, retry_period=2)
