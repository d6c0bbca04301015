"""The scenarios fitgate exists for (issue #13), each measured and printed.

Scenario 1 runs the same gang twice in one test: through Kueue's built-in
ProvisioningRequest check, then through fitgate (installed with the chart, ``fitgate
serve`` as the chart's ServiceAccount). The figures go into the table printed at the end
of the run (``e2e/tests/conftest.py``).
"""

from __future__ import annotations

import os

import pytest

from e2e import harness
from e2e.scenarios import burst, figures, fitgate, many, topology

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(480)
async def test_scenario_1_topology_mismatch_side_by_side(
        e2e: harness.Harness, fitgate_installed: fitgate.Fitgate) -> None:
    builtin = await topology.run_builtin(e2e)
    fit = await topology.run_fitgate(e2e, fitgate.CHECK_NAME)
    rows = [figures.record(builtin.row()), figures.record(fit.row())]
    print("\n" + figures.table(rows))

    # Kueue's check books CPU only: the autoscaler picks the cheap group, Kueue admits,
    # and no pod can get 8 GPUs on one PCIe root there.
    assert builtin.seconds is None, builtin
    assert set(builtin.nodes) == {topology.group_name("builtin", "cheap")}, builtin
    assert all(phase.startswith("Pending") for phase in builtin.pods.values()), builtin
    assert builtin.unused_node_seconds > 0
    # fitgate plans with the devices: 4 dear nodes, one pod each, all Running.
    assert fit.seconds is not None, fit
    dear = topology.group_name("fitgate", "dear")
    assert {g: len(n) for g, n in fit.nodes.items()} == {dear: topology.GANG_PODS}, fit
    hosts = {phase.split("@")[1] for phase in fit.pods.values()}
    assert len(hosts) == topology.GANG_PODS and all(h.startswith(dear) for h in hosts), fit


@pytest.mark.timeout(900)
async def test_scenario_11_many_gangs_at_once_are_all_decided(
        e2e: harness.Harness, fitgate_installed: fitgate.Fitgate) -> None:
    try:
        meter = burst.Meter({**fitgate_installed.pids(), "e2e test": os.getpid()},
                            fitgate_installed.metrics_url(),
                            alone=frozenset({"e2e test"}))  # its children: the cluster
        result = await many.run(e2e, fitgate.CHECK_NAME, meter=meter)
        figures.record(result.row())
        print("\n" + figures.table([result.row()]))
        assert result.breakdown is not None
        result.breakdown.write(e2e.run_dir / "burst.json")
        figures.detail([*result.breakdown.lines(),
                        f"  every gang's timeline: {e2e.run_dir / 'burst.json'}"])
        print("\n".join(result.breakdown.lines()))
        workloads = await e2e.kube.list("kueue.x-k8s.io/v1beta2", "Workload", e2e.namespace)
    finally:
        await many.delete_jobs(e2e)

    assert not result.undecided, f"undecided after {many.DECIDE_TIMEOUT_S:.0f} s: " \
        f"{result.undecided[:20]}"
    assert result.admitted == result.expected["admitted"], result
    assert result.explained == result.expected["explained"], result
    assert many.duplicated_or_orphaned(result.requests, workloads) == []
    # Only the big gangs needed new nodes: one dear node each, nothing more; no two of
    # them counted the same new node, so each runs on its own.
    dear = topology.group_name("fitgate", "dear")
    assert {g: len(n) for g, n in result.nodes.items()} == {dear: many.BIG}, result.nodes
    assert result.big_seconds is not None, "\n".join([str(result.big), *result.big_why])
    assert len(set(result.big.values())) == many.BIG, result.big
    # The breakdown saw every gang through: each decided one with its Workload and the
    # write that decided it, so the shares cover the whole burst.
    assert result.breakdown.incomplete() == [], result.breakdown.incomplete()
