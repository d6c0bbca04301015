"""`bench.realistic --breakdown`: one cold decision split into its phases."""

from __future__ import annotations

import re

import pytest

from bench import realistic
from fitcore import api, inventory


def test_breakdown_names_each_phase_and_restores_the_functions(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = (inventory.Inventory._current, inventory.Inventory._projected, api.allocate)
    realistic.breakdown(40)
    out = capsys.readouterr().out
    total = float(re.search(r"one cold decision: ([0-9.]+) ms CPU", out).group(1))  # type: ignore[union-attr]
    phases = dict(re.findall(r"^  (\S.*?)\s+(-?[0-9.]+)$", out, re.M))
    assert set(phases) == {"node index (_current)", "projection of every node",
                           "allocator calls", "the rest"}
    assert sum(float(v) for v in phases.values()) == pytest.approx(total, abs=0.5)
    assert all(float(v) > 0 for k, v in phases.items() if k != "the rest")
    assert (inventory.Inventory._current, inventory.Inventory._projected,
            api.allocate) == before
