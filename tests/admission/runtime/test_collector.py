"""After a full collection its survivors are frozen (the next one walks only what is
newer); once per `full_every` everything is handed back so a full collection sees it."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from admission.runtime import collector


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    """Only this test's collections (none started by allocations), nothing frozen."""
    gc.unfreeze()
    gc.disable()
    yield
    gc.enable()
    gc.unfreeze()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_survivors_of_a_full_collection_are_frozen_and_handed_back_hourly() -> None:
    clock = Clock()
    policy = collector.Survivors(asyncio.get_running_loop(), 3600.0, clock)
    try:
        kept = [[i] for i in range(10_000)]  # alive through the collection
        gc.collect(1)  # not a full collection: nothing frozen
        await asyncio.sleep(0)
        assert gc.get_freeze_count() == 0
        gc.collect()
        await asyncio.sleep(0)
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept) and policy.freezes == 1
        assert not any(o is kept for o in gc.get_objects(2))  # out of the walk
        clock.now = 3600.0  # an hour on: the next full collection sees everything
        gc.collect()
        await asyncio.sleep(0)
        assert gc.get_freeze_count() == 0 and policy.freezes == 1
        gc.collect()
        await asyncio.sleep(0)
        assert gc.get_freeze_count() >= len(kept) and policy.freezes == 2
    finally:
        policy.remove()
    gc.collect()
    await asyncio.sleep(0)
    assert policy.freezes == 2  # removed: no more freezes
