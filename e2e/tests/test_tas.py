"""Scenario 12 (issue #25): Kueue's topology-aware scheduling assigns a rack whose GPUs
are split across PCIe roots; fitgate makes it reserve again on the rack that fits, and the
gang runs there (``e2e/scenarios/tas.py``). fitgate is installed with the chart and runs
as ``fitgate serve`` under the chart's ServiceAccount."""

from __future__ import annotations

import pytest

from e2e import harness
from e2e.scenarios import figures, fitgate, tas

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(420)
async def test_scenario_12_tas_wrong_rack_by_devices_runs_on_the_right_rack(
        e2e: harness.Harness, fitgate_installed: fitgate.Fitgate) -> None:
    result = await tas.run(e2e, fitgate.CHECK_NAME)
    figures.record(result.row())
    print("\n" + figures.table([result.row()]))
    gang = result.gang
    # Both pods Running (kwok: bound, phase Running), on the rack whose GPUs share a root.
    assert gang.seconds is not None, (gang, result.job)
    assert len(gang.pods) == tas.GANG_PODS, gang
    assert result.rack_of_pods() == {"whole"}, (gang.pods, result.nodes)
    # Never on (or pinned to) the wrong rack: no pod of the job was bound or pinned there.
    pods = await e2e.pods_of_job("wrong-rack")
    assert tas.pods_ever_on(pods, result.nodes, "split") == [], pods
    # Kueue's first choice was the split rack; fitgate said so (on the Job), steered Kueue
    record = tas.disagreement(result.job)
    assert tas.rack(e2e, "split") in str(record.get("assigned")), result.job
    assert "does not fit in the topology domain Kueue assigned" in str(record.get("message"))
    assert record.get("steeredTo") == {"main": {tas.RACK_LABEL: tas.rack(e2e, "whole")}}
    # ... through the Workload's pod set (Kueue carries it into the Job when it starts it).
    wl_spec = (result.gang.workload or {}).get("spec") or {}
    selector = wl_spec["podSets"][0]["template"]["spec"].get("nodeSelector") or {}
    assert selector.get(tas.RACK_LABEL) == tas.rack(e2e, "whole"), selector
    # Existing nodes held the gang: nothing was bought for it.
    assert result.requests == [], result.requests
    # It took a second reservation (the first was on the wrong rack).
    assert result.reservations is not None and result.reservations >= 2, result
