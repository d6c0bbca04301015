"""The one bounded wait of the admission unit tests: poll a condition on the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest


async def until(pred: Callable[[], object], what: str, timeout: float,
                interval: float = 0.01) -> None:
    """Poll ``pred`` every ``interval`` seconds; fail the test naming ``what`` after
    ``timeout`` seconds."""
    async def loop() -> None:
        while not pred():
            await asyncio.sleep(interval)
    try:
        await asyncio.wait_for(loop(), timeout)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")
