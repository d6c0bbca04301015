"""The peers at their best (issue #19): every scenario of ``e2e/scenarios/peers.py``
through every baseline, with cluster-autoscaler's DRA simulation on, one table.

The test restarts cluster-autoscaler with ``--enable-dynamic-resource-allocation=true``
for its run and puts it back afterwards. All cells run concurrently; each prints its row
(the figures go into the table at the end of the e2e run). What is asserted: fitgate got
every gang Running on nodes of the group that fits, buying what its plan needs; for the
peers, that the outcome was observed and recorded with its reason, and that where a peer
got a gang Running its pods run on nodes that can host them — nothing assumes a peer
fails.
"""

from __future__ import annotations

import pytest

from e2e import harness
from e2e.cluster.local import cluster
from e2e.scenarios import figures, fitgate, peers

pytestmark = [pytest.mark.e2e]

DRA_FLAG = "--enable-dynamic-resource-allocation=true"


@pytest.mark.timeout(420)
async def test_peers_side_by_side_with_autoscaler_dra(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster,
        fitgate_installed: fitgate.Fitgate) -> None:
    local_cluster.configure_autoscaler(dra=True)
    try:
        assert DRA_FLAG in local_cluster.process("cluster-autoscaler").argv
        cells = await peers.run(e2e, fitgate.CHECK_NAME)
    finally:
        local_cluster.configure_autoscaler(dra=False)
    rows = [figures.record(c.row()) for c in cells]
    print("\n" + figures.table(rows))

    assert {(c.scenario.key, c.baseline.key) for c in cells} == {
        (s.key, b.key) for s in peers.SCENARIOS for b in peers.BASELINES}
    assert not [c.outcome for c in cells if c.error], [c.row() for c in cells if c.error]
    for cell in cells:
        fits = {k.name for k in cell.scenario.kinds if k.fits}
        where = {kind.removeprefix("live ") for kind in cell.hosts.values()}
        # Whoever ran pods, ran them on nodes that can host them (kube-scheduler's
        # allocation agrees with the scenario's premise).
        assert where <= fits, (cell.scenario.title, cell.baseline.title, cell.hosts)
        if cell.baseline.live:
            assert sum(len(v) for v in cell.live.values()) == len(cell.scenario.kinds), cell
        if cell.seconds is None:
            # A gang that did not run: the row says why (the check's state, the
            # ProvisioningRequest's conditions, or the scheduler's reason).
            assert cell.notes, cell
        else:
            assert cell.running == cell.scenario.pods, cell
        if cell.baseline.queue == "builtin":
            assert cell.admitted is not None
            assert cell.admitted or cell.seconds is None, cell
        if cell.baseline.queue == "fitgate":
            assert cell.seconds is not None, cell.row()
            assert {k: len(v) for k, v in cell.bought.items()} == {
                cell.scenario.fitting: cell.scenario.new_nodes}, cell.row()
            assert where == {cell.scenario.fitting}, cell.hosts
