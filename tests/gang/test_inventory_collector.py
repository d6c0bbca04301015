"""Decisions run with the cyclic garbage collector paused (`inventory._collector_paused`):
the collector is as the caller left it afterwards, also when the decision raises, and
what is decided does not depend on it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from fitcore import errors, gang, inventory, workload
from tests.gang import realistic as rl

TEMPLATES = [rl.template("h100-root")]


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _inventory() -> inventory.Inventory:
    inv = inventory.Inventory()
    for o in [*rl.cluster(80), *rl.shapes()]:
        inv.apply("ADDED", o)
    return inv


def _gang(pods: int) -> gang.Gang:
    return workload.gang_of(rl.workload(pods, topology=True), TEMPLATES)


class _Seen:
    """A node filter that records whether the collector was on while it ran."""

    def __init__(self) -> None:
        self.enabled: set[bool] = set()

    def __call__(self, node: object) -> bool:
        self.enabled.add(gc.isenabled())
        return True


@pytest.mark.usefixtures("collector_on")
def test_paused_inside_a_decision_and_enabled_after() -> None:
    inv = _inventory()
    seen = _Seen()
    inv.plan(_gang(8), node_filter=seen)
    assert seen.enabled == {False}
    assert gc.isenabled()
    seen = _Seen()
    inv.fit(_gang(8), node_filter=seen)
    assert seen.enabled == {False}
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_enabled_again_when_the_decision_raises() -> None:
    inv = _inventory()

    def refuse(node: object) -> bool:
        raise errors.InputError([])

    with pytest.raises(errors.InputError):
        inv.fit(_gang(8), node_filter=refuse)
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_left_off_when_the_caller_turned_it_off() -> None:
    inv = _inventory()
    gc.disable()
    try:
        result = inv.fit(_gang(8))
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert result.verdict == "fits"


@pytest.mark.usefixtures("collector_on")
def test_same_answers_with_the_collector_off_beforehand() -> None:
    """The pause changes when garbage is collected, never what is decided."""
    answers = []
    for off in (False, True):
        inv = _inventory()
        if off:
            gc.disable()
        try:
            got = [(r.verdict, r.placements, r.plan) for r in
                   (inv.fit(_gang(8)), inv.plan(_gang(64)), inv.fit(_gang(256)))]
        finally:
            gc.enable()
        answers.append(got)
    assert answers[0] == answers[1]
