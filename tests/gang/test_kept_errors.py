"""Answers kept across decisions hold no decision's frames.

An allocation question answered by an error (`reference.ClaimError`: a MIG selector
that fails on a GPU without MIG profiles) is kept in the inventory's `cache.Store` as
its answer. Kept with its traceback, it held every frame up to the gang search that
asked, and with them every node class and fill of that decision: hundreds of MiB at
10,000 nodes."""

from __future__ import annotations

import gc

import pytest

from fitcore import api, cache, gangsearch, inventory, workload
from tests.gang import realistic as rl

TEMPLATES = [rl.mig_template("a30-slices"), rl.template("h100-root")]


def _classes_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, gangsearch._Class))


@pytest.mark.skipif(not api.compiled_available(), reason="FITCORE_NO_EXTENSIONS=1: the "
                    "Python reference allocator keeps no compiled answers, errors or not")
def test_a_decision_that_kept_an_error_leaves_no_search_behind() -> None:
    inv = inventory.Inventory()
    for o in rl.cluster(120):
        inv.apply("ADDED", o)
    before = _classes_alive()
    for pods, template in ((2, "a30-slices"), (1, "h100-root"), (4, "a30-slices")):
        inv.plan(workload.gang_of(rl.workload(pods, template_name=template), TEMPLATES))
    errors = [v for e in inv._store.entries.values() for _, v in e.compiled.values()
              if isinstance(v, BaseException)]
    assert errors, "the impossible claim was not kept as an error: the test tests nothing"
    assert all(e.__traceback__ is None for e in errors)
    assert _classes_alive() == before


def test_without_frames_strips_the_whole_chain() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise ValueError("outer") from inner
    except ValueError as exc:
        kept = cache.without_frames(exc)
    assert isinstance(kept, ValueError) and kept.__traceback__ is None
    assert kept.__cause__ is not None and kept.__cause__.__traceback__ is None
    assert cache.without_frames("baked") == "baked"
