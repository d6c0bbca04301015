"""The gate contains a failed decision to its Workload: an exception or a decision past
its deadline removes the gate with the reason (the AdmissionCheck then decides), instead
of the controller retrying the key forever with the Job held and nothing said."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

import fitcore
from admission.gate import predicates as gating
from admission.gate import reconciler as gate
from tests.admission.gate import test_reconciler as tg


class Raising:
    def plan(self, gang_: fitcore.Gang, shapes: Collection[str] | None = None,
             node_filter: Any = None) -> fitcore.PlanResult:
        raise RuntimeError("engine bug")


class Stuck:
    def __init__(self) -> None:
        self.release = threading.Event()

    def plan(self, gang_: fitcore.Gang, shapes: Collection[str] | None = None,
             node_filter: Any = None) -> fitcore.PlanResult:
        self.release.wait(60)
        return fitcore.PlanResult("unsatisfiable", category="configuration")


async def test_an_exception_removes_the_gate_with_the_reason() -> None:
    w = tg.World()
    w.gate.engine = Raising()
    assert await w.reconcile() is None
    assert tg.GATED not in w.job_annotations()
    [event] = w.events()
    assert event["reason"] == "GateCleared"
    assert "RuntimeError: engine bug" in event["note"]
    assert "the AdmissionCheck decides" in event["note"]


async def test_a_decision_past_its_deadline_removes_the_gate() -> None:
    w = tg.World()
    stuck = Stuck()
    w.gate.engine = stuck
    w.gate.config = gate.GateConfig(decision_timeout=0.2)
    try:
        assert await w.reconcile() is None
    finally:
        stuck.release.set()
    assert w.job_annotations().get(tg.GATED, "") != gating.GATE
    [event] = w.events()
    assert "took longer than 0.2 s" in event["note"]
