"""All or nothing with Karpenter when one instance type's capacity runs out partway.

fitgate asks for the gang's 4 nodes on the cheapest shape (``cap-cheap``); the cloud has
2 of its instance type left (how, in e2e/karpenter/capacity.py): Karpenter launches 2
NodeClaims and deletes the other 2 with InsufficientCapacityError. fitgate must delete
the 2 that launched as well, say why on the check, and ask for the next shape in cost
order (``cap-dear``), where the gang runs. The figures go to the suite's final table.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import pytest

from e2e import harness
from e2e.cluster.local import cluster
from e2e.karpenter import capacity, scenario
from e2e.scenarios import figures, fitgate, topology

pytestmark = [pytest.mark.e2e]

JOB = "cap"


async def _check_message(e2e: harness.Harness, seen: list[str]) -> None:
    """Append the check's state and message if they changed since the last one seen."""
    wl = await e2e.workload_of_job(JOB)
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == fitgate.CHECK_NAME:
            text = f"{entry.get('state')}: {entry.get('message', '')}"
            if not seen or seen[-1] != text:
                seen.append(text)


async def _check_messages(e2e: harness.Harness, seen: list[str]) -> None:
    """`_check_message` every half second (until cancelled)."""
    while True:
        await _check_message(e2e, seen)
        await asyncio.sleep(0.5)


async def _run_gang(e2e: harness.Harness, local: cluster.LocalCluster,
                   claims: capacity.ClaimLog, messages: list[str]) -> scenario.Run:
    """Both shapes, a queue through fitgate's check, the gang submitted; returns once its
    pods run (or not, after the timeout), with the check's messages on the way."""
    await topology.create_claim_template(e2e)
    for pool in (capacity.CHEAP, capacity.DEAR):
        await e2e.kube.apply(scenario.node_shape(pool))
        e2e._cluster_objects.append((topology.SHAPE_API, "NodeShape", pool.name))
    queue = await e2e.create_queues(f"cap-{e2e.namespace}",
                                    admission_checks=[fitgate.CHECK_NAME])
    await claims.start()
    poller = asyncio.create_task(_check_messages(e2e, messages))
    try:
        submitted = time.time()
        await e2e.create_job(JOB, queue, parallelism=topology.GANG_PODS,
                             cpu=topology.GANG_CPU,
                             claim_template_name=topology.CLAIM_TEMPLATE)
        return await scenario.measure(e2e, local, "fitgate", JOB, submitted,
                                      scenario.FITGATE_TIMEOUT_S)
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        await _check_message(e2e, messages)  # the final one (Ready once pods run)


async def _first_attempt(e2e: harness.Harness, claims: capacity.ClaimLog
                         ) -> tuple[list[capacity.ClaimHistory], set[str], set[str]]:
    """The first attempt's NodeClaims, those Karpenter refused and those it launched:
    4 of the cheap pool; the third and fourth refused, with InsufficientCapacityError
    Events; the other two launched."""
    first = claims.of_plan(1, 0)
    assert len(first) == topology.GANG_PODS, claims.claims
    assert {h.node_pool for h in first} == {capacity.CHEAP.name}, first
    names = {h.name for h in first}
    sold_out = {h.name for h in first if h.node_class == capacity.SOLD_OUT_CLASS}
    assert len(sold_out) == topology.GANG_PODS - capacity.LEFT, first
    ice = await e2e.kube.list("v1", "Event", field_selector=(
        "involvedObject.kind=NodeClaim,reason=InsufficientCapacityError"))
    assert {ev["involvedObject"]["name"] for ev in ice} == sold_out, ice
    # Launched: seen so by the watch, or in Karpenter's status-transition Event.
    transitions = await e2e.kube.list("v1", "Event", field_selector=(
        "involvedObject.kind=NodeClaim,reason=Launched"))
    launched = {h.name for h in first if h.launched} | (
        {ev["involvedObject"]["name"] for ev in transitions
         if "Unknown -> True" in str(ev.get("message"))} & names)
    assert launched == names - sold_out, first
    return first, sold_out, launched


async def _nothing_left_of(e2e: harness.Harness, first: list[capacity.ClaimHistory],
                           launched: set[str], gang: dict[str, str]) -> int:
    """All or nothing: every NodeClaim of the first attempt is gone, the launched ones
    too. Returns how many nodes kwok left: its Delete removes a NodeClaim, not its node,
    so the node of a launched NodeClaim deleted before it registered stays (a cloud would
    have terminated the instance). Such a node must be one of a launched NodeClaim of the
    failed attempt and hold none of the gang's pods; the test removes it, as a cloud's
    node lifecycle would."""
    async def first_attempt_gone() -> bool:
        for h in first:
            if await e2e.kube.get(capacity.KARPENTER_API, "NodeClaim", h.name):
                return False
        return True
    await e2e.wait_for(first_attempt_gone, 60, "the first attempt's NodeClaims deleted")
    assert all(h.deleted for h in first), first
    leaked = await e2e.kube.list("v1", "Node", label_selector=(
        f"{scenario.NODE_POOL_LABEL}={capacity.CHEAP.name}"))
    for node in leaked:
        name = node["metadata"]["name"]
        assert any(name.startswith(f"kwok-{c}-") for c in launched), name
        assert name not in gang, (name, gang)
        await e2e.kube.delete("v1", "Node", name)
    return len(leaked)


def _runs_on_the_next_shape(local: cluster.LocalCluster, run: scenario.Run,
                            gang: dict[str, str], messages: list[str]) -> None:
    """The gang runs on 4 nodes of the dear pool, one NodeClaim of the next plan each."""
    assert run.seconds is not None, (run, messages)
    assert set(gang.values()) == {capacity.DEAR.instance_type}, gang
    assert len(gang) == topology.GANG_PODS, gang
    now = scenario.node_claims(local)
    assert len(now) == topology.GANG_PODS, now
    assert {(x["metadata"]["labels"][scenario.NODE_POOL_LABEL],
             x["metadata"]["annotations"].get("fitgate.io/plan-index"))
            for x in now} == {(capacity.DEAR.name, "1")}, now
    assert {(x.get("status") or {}).get("nodeName") for x in now} == set(gang), now


async def _said_why(e2e: harness.Harness, messages: list[str], sold_out: set[str]) -> None:
    """The check said why, in words a data scientist reads: capacity ran out, every
    NodeClaim of the attempt was deleted, the next shape was asked for; it keeps saying so
    while the gang waits for that shape and once it runs there. The Workload has a
    Warning Event with the same. fitgate fails the attempt at the first NodeClaim
    Karpenter refuses: the message names those refused by then (one or both)."""
    found = re.search(r"Karpenter could not launch ([12]) of the 4 new nodes "
                      r"\(NodeClaim ([^)]*)\): insufficient capacity "
                      r"\(InsufficientCapacityError: ", messages[-1])
    assert found, messages[-1]
    named = set(found.group(2).split(", "))
    assert named <= sold_out and len(named) == int(found.group(1)), (named, sold_out)
    why = found.group(0)
    waiting = [m for m in messages
               if m.startswith(f"Pending: capacity: waiting for Karpenter: 4 × "
                               f"{capacity.DEAR.name}")]
    assert waiting, messages
    assert f"earlier: {why}" in waiting[0], waiting[0]
    assert "every NodeClaim of the attempt deleted; next plan" in waiting[0], waiting[0]
    assert messages[-1].startswith("Ready: verified on the nodes of NodeClaims ") \
        and f"earlier: {why}" in messages[-1], messages[-1]
    events = await e2e.kube.list("events.k8s.io/v1", "Event", e2e.namespace,
                                 field_selector="reason=NodeClaimsFailed")
    assert [ev["note"] for ev in events if ev["note"].startswith(why)], events


@pytest.mark.timeout(900)
async def test_capacity_running_out_partway_deletes_the_whole_attempt_and_the_next_shape_runs(
        karpenter_e2e: harness.Harness, karpenter_cluster: cluster.LocalCluster) -> None:
    e2e, local = karpenter_e2e, karpenter_cluster
    capacity.setup(local)
    claims = capacity.ClaimLog(e2e.kube.api)
    messages: list[str] = []
    fg = fitgate.Fitgate(e2e, local, chart_values=("karpenter.enabled=true",))
    try:
        await fg.install()
        run = await _run_gang(e2e, local, claims, messages)
        first, sold_out, launched = await _first_attempt(e2e, claims)
        gang, unused = await capacity.gang_nodes(e2e, JOB)
        leaked = await _nothing_left_of(e2e, first, launched, gang)
        _runs_on_the_next_shape(local, run, gang, messages)
        row = capacity.row(run, gang, unused, {capacity.CHEAP.instance_type: len(launched)},
                           len(launched), len(sold_out), leaked)
        figures.record(row)
        print("\n" + figures.table([row]))
        print("[karpenter] the check's messages:\n  " + "\n  ".join(messages))
        await _said_why(e2e, messages, sold_out)
    finally:
        await claims.stop()
        await fg.uninstall()
        capacity.teardown(local)
