"""fitgate with Karpenter on the local control plane: scenario 1's topology mismatch,
Karpenter alone and through fitgate, side by side (figures in the suite's final table)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from e2e import harness, kube
from e2e.cluster.local import cluster
from e2e.karpenter import scenario
from e2e.scenarios import figures, fitgate, topology

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(900)
async def test_topology_mismatch_karpenter_alone_and_with_fitgate(
        karpenter_e2e: harness.Harness, karpenter_cluster: cluster.LocalCluster) -> None:
    e2e, local = karpenter_e2e, karpenter_cluster
    scenario.setup(local)

    alone = await scenario.run_karpenter_alone(e2e, local)
    figures.record(alone.row())
    # Karpenter as it ships skips pods with ResourceClaims: nothing bought, pods Pending.
    assert alone.nodes == {} and alone.claims == {}, alone
    assert alone.seconds is None, alone
    scenario.release_nodes(local)

    fg = fitgate.Fitgate(e2e, local, chart_values=("karpenter.enabled=true",))
    try:
        await fg.install()
        with_fitgate = await scenario.run_fitgate(e2e, local, fitgate.CHECK_NAME)
        figures.record(with_fitgate.row())
        assert with_fitgate.seconds is not None, with_fitgate
        assert with_fitgate.instance_types == {"gpu-one-root-8x"}, with_fitgate
        assert len(with_fitgate.nodes) == 4, with_fitgate
        # Every NodeClaim is one fitgate created for the gang (none of Karpenter's own).
        assert len(with_fitgate.claims) == 4, with_fitgate.claims
        assert all("fitgate.io/workload-uid" in labels
                   for labels in with_fitgate.claims.values()), with_fitgate.claims

        # Once the gang's pods are bound, fitgate hands the NodeClaims to Karpenter:
        # do-not-disrupt dropped from them and their nodes.
        deadline = time.monotonic() + 60
        while True:
            claims = scenario.node_claims(local)
            held = [x["metadata"]["name"] for x in claims
                    if "karpenter.sh/do-not-disrupt" in (x["metadata"].get("annotations")
                                                         or {})]
            if not held:
                break
            assert time.monotonic() < deadline, f"do-not-disrupt still on {held}"
            time.sleep(1.0)
    finally:
        await fg.uninstall()
    print("\n" + figures.table([alone.row(), with_fitgate.row()]))


@pytest.mark.timeout(900)
async def test_topology_mismatch_with_karpenter_dra_simulation_on(
        karpenter_e2e: harness.Harness, karpenter_cluster: cluster.LocalCluster) -> None:
    """The same gang with Karpenter restarted with ``IGNORE_DRA_REQUESTS=false`` (its DRA
    allocator on; restarting the one process took 0.5 s, where a second cluster takes
    about 10 s to start and its own teardown), Karpenter alone and then through fitgate."""
    e2e, local = karpenter_e2e, karpenter_cluster
    scenario.setup(local)
    local.configure_karpenter(dra=True)
    try:
        alone = await scenario.run_karpenter_alone(e2e, local,
                                                   path="Karpenter alone (DRA on)")
        figures.record(alone.row())
        scenario.release_nodes(local)

        fg = fitgate.Fitgate(e2e, local, chart_values=("karpenter.enabled=true",))
        try:
            await fg.install()
            with_fitgate = await scenario.run_fitgate(
                e2e, local, fitgate.CHECK_NAME, path="fitgate, Karpenter DRA on")
            figures.record(with_fitgate.row())
            # Karpenter decides on pending pods within its batch window (1-3 s here): a
            # NodeClaim of its own for the gang would show by now.
            await asyncio.sleep(10)
            later = {x["metadata"]["name"] for x in scenario.node_claims(local)}
        finally:
            await fg.uninstall()
    finally:
        local.configure_karpenter(dra=False)
    print("\n" + figures.table([alone.row(), with_fitgate.row()]))
    # Measured: Karpenter's allocator looks for the devices of new nodes in the instance
    # types' ResourceSlice templates, and the kwok provider's instance types declare none:
    # no instance type satisfies the claim, nothing is bought, the pods stay Pending.
    assert alone.seconds is None and alone.nodes == {} and alone.claims == {}, alone
    assert any("no instance type can satisfy the allocation" in n for n in alone.notes), alone
    # fitgate still buys the right instance type, and Karpenter buys nothing extra for
    # the gang's pods: every NodeClaim is one of fitgate's four.
    assert with_fitgate.seconds is not None, with_fitgate
    assert with_fitgate.instance_types == {"gpu-one-root-8x"}, with_fitgate
    assert len(with_fitgate.nodes) == 4, with_fitgate
    assert len(with_fitgate.claims) == 4, with_fitgate.claims
    assert all("fitgate.io/workload-uid" in labels
               for labels in with_fitgate.claims.values()), with_fitgate.claims
    assert later == set(with_fitgate.claims), (later, with_fitgate.claims)


def _attempt_claims(local: cluster.LocalCluster, attempt: int) -> list[dict[str, Any]]:
    """The NodeClaims of the first plan of `attempt` (a next plan's are others)."""
    return [x for x in scenario.node_claims(local)
            if (x["metadata"].get("labels") or {}).get("fitgate.io/attempt") == str(attempt)
            and (x["metadata"].get("annotations") or {}).get("fitgate.io/plan-index") == "0"]


@pytest.mark.timeout(600)
async def test_all_or_nothing_claims_not_initialized_by_the_deadline_are_deleted_together(
        karpenter_e2e: harness.Harness, karpenter_cluster: cluster.LocalCluster) -> None:
    """The only shape's NodePool launches nodes that register after 10 minutes. At the
    deadline (40 s here) fitgate deletes every NodeClaim of the attempt and retries: no
    NodeClaim of the failed attempt is left behind."""
    e2e, local = karpenter_e2e, karpenter_cluster
    scenario.setup_all_or_nothing(local)
    fg = fitgate.Fitgate(e2e, local, chart_values=(
        "karpenter.enabled=true", "provisioning.timeoutSeconds=40"))
    try:
        await fg.install()
        await topology.create_claim_template(e2e)
        shape = scenario.node_shape(scenario.SLOW)
        await e2e.kube.apply(shape)
        e2e._cluster_objects.append((topology.SHAPE_API, "NodeShape",
                                     shape["metadata"]["name"]))
        queue = await e2e.create_queues(f"aon-{e2e.namespace}",
                                        admission_checks=[fitgate.CHECK_NAME])
        await e2e.create_job("gang-aon", queue, parallelism=topology.GANG_PODS,
                             cpu=topology.GANG_CPU,
                             claim_template_name=topology.CLAIM_TEMPLATE)

        async def launched() -> list[dict[str, Any]] | None:
            claims = _attempt_claims(local, 1)
            up = [x for x in claims if kube.has_condition(x, "Launched")]
            return claims if len(claims) == 4 and len(up) == 4 else None
        claims = await e2e.wait_for(launched, 120, "4 NodeClaims of attempt 1 launched")
        assert {x["metadata"]["labels"]["karpenter.sh/nodepool"] for x in claims} == {
            "aon-slow"}

        async def retried() -> dict[str, Any] | None:
            wl = await e2e.workload_of_job("gang-aon")
            for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
                if entry.get("name") == fitgate.CHECK_NAME and \
                        "were not all initialized" in str(entry.get("message")):
                    return dict(entry)
            return None
        entry = await e2e.wait_for(retried, 120, "the check retried at the deadline")
        assert entry["state"] == "Retry", entry
        assert "every NodeClaim of the attempt deleted" in entry["message"], entry

        async def all_gone() -> bool:
            return not _attempt_claims(local, 1)
        await e2e.wait_for(all_gone, 60, "every NodeClaim of attempt 1 deleted")
        print(f"\n[karpenter] all or nothing: {entry['message'][:300]}")
    finally:
        await fg.uninstall()


@pytest.mark.timeout(600)
async def test_fitgate_killed_after_creating_node_claims_converges_without_duplicates(
        karpenter_e2e: harness.Harness, karpenter_cluster: cluster.LocalCluster) -> None:
    """fitgate is SIGKILLed once it has created the gang's NodeClaims (their nodes register
    30 s later) and started again: it finds its NodeClaims by name and label, creates
    none twice, verifies and admits; the gang runs on exactly those nodes."""
    e2e, local = karpenter_e2e, karpenter_cluster
    scenario.setup_all_or_nothing(local)
    fg = fitgate.Fitgate(e2e, local, chart_values=("karpenter.enabled=true",))
    try:
        await fg.install()
        await topology.create_claim_template(e2e)
        shape = scenario.node_shape(scenario.DELAYED)
        await e2e.kube.apply(shape)
        e2e._cluster_objects.append((topology.SHAPE_API, "NodeShape",
                                     shape["metadata"]["name"]))
        queue = await e2e.create_queues(f"crash-{e2e.namespace}",
                                        admission_checks=[fitgate.CHECK_NAME])
        await e2e.create_job("gang-crash", queue, parallelism=topology.GANG_PODS,
                             cpu=topology.GANG_CPU,
                             claim_template_name=topology.CLAIM_TEMPLATE)

        async def created() -> list[str] | None:
            names = sorted(x["metadata"]["name"] for x in scenario.node_claims(local))
            return names if len(names) == 4 else None
        before = await e2e.wait_for(created, 120, "the gang's 4 NodeClaims")
        pid = fg.replicas[0].pid
        assert pid is not None
        os.killpg(os.getpgid(pid), signal.SIGKILL)  # no Lease release, no cleanup
        await fg.replicas[0].stop()
        await fg.start(0)
        await fg.wait_active(timeout=120)

        pods = await e2e.running_pods("gang-crash", topology.GANG_PODS, timeout=240)
        after = sorted(x["metadata"]["name"] for x in scenario.node_claims(local))
        assert after == before, (before, after)  # no duplicate, no orphan
        nodes = {p["spec"]["nodeName"] for p in pods}
        claimed = {(x.get("status") or {}).get("nodeName")
                   for x in scenario.node_claims(local)}
        assert nodes == claimed, (nodes, claimed)
    finally:
        await fg.uninstall()
