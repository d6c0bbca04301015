"""`bench.memory` at a tiny size: it starts the Service, lets a burst be decided and
finds every part it reports (the stores, the live engine and the gate's idle engine),
so its table cannot silently leave a part out."""

from __future__ import annotations

import gc

import pytest

from bench import memory


@pytest.mark.timeout(60)
async def test_every_part_is_found_and_measured(capsys: pytest.CaptureFixture[str]) -> None:
    gc.unfreeze()
    await memory.run(20, 6, 30.0)
    gc.unfreeze()
    out = capsys.readouterr().out
    assert "after a burst of 6 (6 decided" in out
    sizes: dict[str, float] = {}
    for line in out.splitlines():
        name, _, rest = line.strip().rpartition("  ")
        if line.startswith("  ") and rest.endswith("MiB"):
            sizes[name.strip()] = float(rest.split()[0].replace(",", ""))
    for part in ("informer stores", "live engine: parsed objects",
                 "live engine: per-node index", "idle engine 1: parsed objects"):
        assert part in sizes, part
    assert sizes["informer stores"] > 0
