"""Contain every failure to its own Workload: an exception while deciding one Workload
answers that Workload (the check's message, an Event, Rejected or Retry with backoff) and
no other; a decision past its deadline is abandoned and the others go on."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

import fitcore
from admission.check import containment, inputs
from admission.check import workload as wlr
from admission.engine import inventory
from admission.kube import errors, kinds
from tests.admission import world as w
from tests.admission.engine import test_inventory as ti
from tests.gang import builders as gb


class Failing(w.Recorded):
    """The world's inventory, raising `exc` when deciding the gang named `victim`."""

    def __init__(self, stores: Any, victim: str, exc: Exception) -> None:
        super().__init__(stores)
        self.victim = victim
        self.exc = exc

    async def plan_async(self, gang_: fitcore.Gang, *, shapes: Iterable[str] | None = None,
                         node_filter: Any = None, held: Collection[str] = ()
                         ) -> fitcore.PlanResult:
        if gang_.name.endswith(self.victim):
            raise self.exc
        return await super().plan_async(gang_, shapes=shapes, node_filter=node_filter,
                                        held=held)


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


def failing(world: w.World, exc: Exception, victim: str = "train") -> None:
    world.inventory.inner.close()
    world.inventory = Failing(world.stores, victim, exc)


def decision_events(world: w.World) -> list[dict[str, Any]]:
    return [e for e in world.api.objects(kinds.EVENT) if e["reason"] == containment.REASON]


async def test_an_exception_answers_its_workload_with_retry_and_others_go_on(
        world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), *w.node("n2"), w.admitted(),
               w.admitted(name="other"))
    failing(world, RuntimeError("engine bug"))
    assert await world.reconcile() is None  # does not raise: contained
    e = world.entry()
    assert e["state"] == "Retry"
    assert e["message"] == ("coordination: fitgate failed while deciding this workload: "
                            "RuntimeError: engine bug (retry in 60s)")
    assert e["requeueAfterSeconds"] == 60
    (event,) = decision_events(world)
    assert event["type"] == "Warning" and event["regarding"]["name"] == "train"
    assert event["note"] == e["message"]
    await world.reconcile(name="other")
    assert world.entry("other")["state"] == "Ready"


async def test_the_retry_backs_off_exponentially(world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted(retry_count=3))
    failing(world, OverflowError("cannot convert float infinity to integer"))
    await world.reconcile()
    assert world.entry()["requeueAfterSeconds"] == 480
    assert world.entry()["message"].endswith("(retry in 480s)")


async def test_a_selector_that_cannot_be_evaluated_is_rejected(world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted())
    failing(world, fitcore.CelError("x", "evaluation exceeds the CEL runtime's "
                                         "comprehension iteration budget", "runtime"))
    await world.reconcile()
    e = world.entry()
    assert e["state"] == "Rejected"
    assert e["message"].startswith("configuration: the workload cannot be decided: ")
    assert "iteration budget" in e["message"]
    assert len(decision_events(world)) == 1


async def test_errors_of_the_api_server_are_left_to_the_controllers_retry(
        world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted())
    failing(world, errors.ApiError(503, "ServiceUnavailable", "try later"))
    with pytest.raises(errors.ApiError):
        await world.reconcile()
    assert world.entry()["state"] == "Pending"


# ------------------------------------------------------------------- overruns


def abandoned() -> float:
    return REGISTRY.get_sample_value("fitgate_inventory_abandoned_decisions_total") or 0.0


async def test_a_decision_past_its_deadline_is_abandoned_and_the_next_is_decided() -> None:
    stores, inv = ti._cluster(2, background=True)
    release = threading.Event()
    entered = threading.Event()

    def stuck(node: Any) -> bool:  # a decision that does not end until released
        entered.set()
        release.wait(60)
        return True
    before = abandoned()
    try:
        inv.timeout = 0.2
        overran = await inv.fit_async(ti._gang(inv, 4), node_filter=stuck)
        assert entered.is_set()
        assert overran.verdict == "undecided"
        assert "longer than 0.2 s" in overran.reasons[0]
        assert abandoned() == before + 1
        # The next decisions run on a fresh engine while the abandoned one still runs;
        # the fresh engine holds every object of the stores, and later events too.
        inv.timeout = 60
        assert (await inv.fit_async(ti._gang(inv, 4))).verdict == "fits"
        stores.put(*gb.gpu_node("n9"))
        assert (await inv.fit_async(ti._gang(inv, 6))).verdict == "fits"
        assert not release.is_set()
    finally:
        release.set()
        inv.close()


async def test_abandoned_decisions_still_running_are_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Past MAX_ABANDONED overrunning decisions still running, no more engines and
    # threads are made: decisions wait for the engine the overrunning one holds.
    monkeypatch.setattr(inventory, "MAX_ABANDONED", 1)
    _, inv = ti._cluster(2, background=True)
    release = threading.Event()

    def stuck(node: Any) -> bool:
        release.wait(60)
        return True
    before = abandoned()
    try:
        inv.timeout = 0.2
        for _ in range(2):
            assert (await inv.fit_async(ti._gang(inv, 4), node_filter=stuck)).verdict \
                == "undecided"
        assert abandoned() == before + 1
        release.set()
        inv.timeout = 60
        assert (await inv.fit_async(ti._gang(inv, 4))).verdict == "fits"
    finally:
        release.set()
        inv.close()


async def test_a_decision_past_its_deadline_retries_its_workload_with_an_event(
        world: w.World) -> None:
    world.seed(*w.base(), *w.node("n1"), w.admitted())
    release = threading.Event()

    class Overrunning(w.Recorded):
        """The world's inventory, every decision held past its deadline by its filter."""

        async def plan_async(self, gang_: fitcore.Gang, *, shapes: Iterable[str] | None = None,
                             node_filter: Any = None, held: Collection[str] = ()
                             ) -> fitcore.PlanResult:
            def stuck(node: Any) -> bool:
                release.wait(60)
                return True
            return await self.inner.plan_async(gang_, shapes=shapes, node_filter=stuck,
                                               held=held)
    world.inventory.inner.close()
    world.inventory = Overrunning(world.stores)
    world.inventory.inner.timeout = 0.2
    try:
        await world.reconcile()
    finally:
        release.set()
    e = world.entry()
    assert e["state"] == "Retry"
    assert "the decision took longer than 0.2 s" in e["message"]
    (event,) = [x for x in world.api.objects(kinds.EVENT)
                if x["reason"] == containment.UNDECIDED]
    assert event["note"] == e["message"]


# ------------------------------------------------------- the idle engine's questions


class StuckIdle:
    """An idle engine (fitting.Engine) whose questions do not end until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = 0

    def plan(self, gang_: fitcore.Gang, shapes: Collection[str] | None = None,
             node_filter: Any = None) -> fitcore.PlanResult:
        self.asked += 1
        self.release.wait(60)
        return fitcore.PlanResult("unsatisfiable", category="configuration")


async def test_an_overrunning_idle_question_retries_the_gang_instead_of_stalling_it(
        world: w.World) -> None:
    # 80 CPUs on 64-CPU nodes: no node hosts it now, so the check asks the idle engine
    # whether it could ever fit before rejecting. That question does not end: the gang is
    # retried (not rejected on a guess, not stalled), and the next gang asking meanwhile
    # is answered at once without queueing another thread behind the stuck one.
    world.seed(*w.base(), *w.node("n1"), w.admitted(w.workers(1, cpu="80")),
               w.admitted(w.workers(1, cpu="80"), name="other"))
    idle = StuckIdle()
    r = wlr.WorkloadReconciler(world.api, inputs.Stores.of(world.stores), world.inventory,
                               clock=world.clock, idle=idle,
                               settings=inputs.Settings(decision_timeout_seconds=0.2))
    try:
        await world.reconcile(r)
        assert world.entry()["state"] == "Retry"
        assert world.entry()["message"].startswith("capacity: does not fit now")
        await world.reconcile(r, name="other")
        assert world.entry("other")["state"] == "Retry"
        assert idle.asked == 1
    finally:
        idle.release.set()
