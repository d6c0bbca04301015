"""Scenarios 2, 4, 5, 8 and 9 of issue #13, run together against one fitgate.

One module fixture installs fitgate with the chart (``fitgate serve`` as the chart's
ServiceAccount, ``e2e/scenarios/fitgate.py``), gives every scenario its own namespace
(its own harness: node pools, queues, cleanup) and runs the scenarios concurrently
(``e2e/scenarios/more.py``); each test then asserts on its own scenario's outcome. A
scenario that raised fails its own test only. A failing test's report carries the
diagnostics of its scenario's namespace and the fitgate process log.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import config

from e2e import conftest as e2e_conftest
from e2e import harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import figures, fitgate, more, slow, topology

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

SCENARIOS: dict[str, Callable[[harness.Harness, str], Awaitable[Any]]] = {
    "2": more.run_fits_on_rack,
    "4": more.run_partitions,
    "5": more.run_shared_capacity,
    "7": slow.run,
    "8": more.run_min_count,
    "9": more.run_tenancy,
}
ALL_TIMEOUT_S = 360.0


class Ran:
    """The scenarios' outcomes (or what each raised) and their harnesses."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Any] = {}
        self.harnesses: dict[str, harness.Harness] = {}
        self.fitgate: fitgate.Fitgate | None = None

    def outcome(self, request: pytest.FixtureRequest, scenario: str) -> Any:
        """The scenario's outcome; its harness (and fitgate's processes) go into the
        failure report."""
        h = self.harnesses[scenario]
        report = harness.Harness(h.kube, h.namespace, local=h.cluster)  # never cleaned up
        report.processes = list(self.fitgate.e2e.processes) if self.fitgate else []
        request.node.stash[e2e_conftest._HARNESS] = report
        result = self.outcomes[scenario]
        if isinstance(result, BaseException):
            raise result
        return result


async def _harness(client: kube.Kube, local: cluster.LocalCluster) -> harness.Harness:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    async def default_sa() -> bool:
        return await client.get("v1", "ServiceAccount", "default", name) is not None
    await kube.wait_for(default_sa, 30, f"default ServiceAccount in {name}")
    return harness.Harness(client, name, local=local, node_groups=local.node_groups)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ran(e2e_cluster: e2e_conftest.ClusterInfo) -> AsyncIterator[Ran]:
    local = e2e_cluster.local
    if local is None:
        pytest.skip("needs the local cluster (FITGATE_E2E_KUBECONFIG is set)")
    local.check_alive()
    out = Ran()
    api = await config.new_client_from_config(config_file=str(e2e_cluster.kubeconfig))
    async with api:
        client = kube.Kube(api)
        home = await _harness(client, local)
        fg = fitgate.Fitgate(home, local)
        out.fitgate = fg
        try:
            await fg.install()
            for name in SCENARIOS:
                out.harnesses[name] = await _harness(client, local)

            async def one(name: str) -> Any:
                return await SCENARIOS[name](out.harnesses[name], fitgate.CHECK_NAME)
            results = await asyncio.wait_for(asyncio.gather(
                *(one(n) for n in SCENARIOS), return_exceptions=True), ALL_TIMEOUT_S)
            out.outcomes = dict(zip(SCENARIOS, results, strict=True))
            yield out
        finally:
            for h in out.harnesses.values():  # while fitgate still deletes its requests
                with contextlib.suppress(Exception):
                    await h.cleanup()
            await fg.uninstall()
            await home.cleanup()
            local.check_alive()


@pytest.mark.timeout(60)
async def test_scenario_2_fits_already_on_one_rack(ran: Ran,
                                                   request: pytest.FixtureRequest) -> None:
    out = ran.outcome(request, "2")
    gang = out.gangs["rack-gang"]
    print("\n" + figures.table([figures.record(out.row("rack-gang", (
        f"{len(gang.pods)} pods Running" if gang.seconds else "not running")))]))
    assert gang.seconds is not None, gang
    # Kueue's TAS assigned a rack: fitgate decides within exactly that domain (issue #25).
    assert gang.check_message.startswith("fits in the topology domain Kueue assigned"), (
        gang.check_message)
    assert out.requests == [], "no ProvisioningRequest for a gang that fits already"
    # Kueue accepted the required topology: it assigned the pod set a topology domain.
    assignment = (gang.workload or {})["status"]["admission"]["podSetAssignments"][0]
    assert assignment.get("topologyAssignment"), assignment
    racks = {out.nodes[node][more.RACK_LABEL] for node in gang.pods.values()}
    assert racks == {"rack-a"}, gang.pods


@pytest.mark.timeout(60)
async def test_scenario_4_partitions_of_one_gpu(ran: Ran,
                                                request: pytest.FixtureRequest) -> None:
    out = ran.outcome(request, "4")
    fits, never = out.gangs["two-of-one-gpu"], out.gangs["three-of-one-gpu"]
    print("\n" + figures.table([figures.record(out.row("two-of-one-gpu", (
        "2 pods Running, each on one GPU's counters" if fits.seconds else "not running")))]))
    assert fits.seconds is not None, fits
    assert out.requests == []
    # The real scheduler agrees: each pod's two partitions share one GPU's counter set,
    # and the two pods use different GPUs (two 3g partitions leave 1 of 7 slices).
    parents = []
    for pod, results in fits.claims.items():
        devices = {r["device"] for r in results}
        assert len(devices) == 2, (pod, results)
        gpus = {d.rsplit("-3g-", 1)[0] for d in devices}
        assert len(gpus) == 1, (pod, devices)
        parents.append(gpus.pop())
    assert sorted(parents) == ["gpu-0", "gpu-1"], fits.claims
    # Three 3g partitions of one GPU: the devices exist, the counters (9 of 7) do not.
    assert not never.admitted and not never.pods, never
    # Held before quota by fitgate's gate, explained: the devices exist, the counters do not.
    assert "shared counters" in never.explanation, never
    assert "QuotaReserved" not in {c["type"] for c in (never.workload or {}).get(
        "status", {}).get("conditions", []) if c.get("status") == "True"}, never.workload


@pytest.mark.timeout(60)
async def test_scenario_5_shared_capacity(ran: Ran, request: pytest.FixtureRequest) -> None:
    out = ran.outcome(request, "5")
    background = out.gangs["background"]
    fits, no = out.gangs["twenty-gi"], out.gangs["thirty-gi"]
    print("\n" + figures.table([figures.record(out.row("twenty-gi", (
        "20Gi gang Running beside 60Gi in use" if fits.seconds else "not running")))]))
    assert len(background.pods) == 2, background
    assert fits.seconds is not None, fits
    [(_, results)] = fits.claims.items()
    assert [(r["device"], r.get("consumedCapacity")) for r in results] == [
        ("shared-0", {"memory": "20Gi"})], results
    # 30Gi more on a device with 20Gi (or, once the 20Gi gang runs, nothing) left.
    assert not no.admitted and not no.pods, no
    assert no.decision.startswith("Retry: capacity: does not fit now"), no
    assert out.requests == []


@pytest.mark.timeout(60)
async def test_scenario_8_partial_admission_min_count(ran: Ran,
                                                      request: pytest.FixtureRequest) -> None:
    out = ran.outcome(request, "8")
    gang = out.gangs["partial"]
    count = more.admitted_count(gang.workload)
    print("\n" + figures.table([figures.record(out.row("partial", (
        f"{count} of {more.MIN_COUNT_PODS} admitted, {len(gang.pods)} Running")))]))
    assert gang.admitted, gang
    assert count == more.MIN_COUNT_QUOTA, gang.workload
    assert len(gang.pods) == more.MIN_COUNT_QUOTA, gang.pods
    assert gang.check_message.startswith("fits on existing nodes"), gang.check_message
    assert out.requests == [], "fitgate placed the admitted 4 pods, not all 6"


@pytest.mark.timeout(60)
async def test_scenario_9_tenancy_keeps_team_b_off_reserved_shape(
        ran: Ran, request: pytest.FixtureRequest) -> None:
    out = ran.outcome(request, "9")
    cheap, dear = (topology.group_name("fitgate", k) for k in ("cheap", "dear"))
    a, b = out.gangs["team-a"], out.gangs["team-b"]
    rows = [figures.record(out.row(g, f"{g}: {len(out.gangs[g].pods)} pod Running"))
            for g in ("team-a", "team-b")]
    print("\n" + figures.table(rows))
    assert a.seconds is not None and b.seconds is not None, (a, b)
    # The same gang: planned on the cheaper shape for team A, on the dear one for team B.
    assert [more.plan_shapes(r) for r in more.requests_of(out, "team-a")] == [{cheap}]
    assert [more.plan_shapes(r) for r in more.requests_of(out, "team-b")] == [{dear}]
    group = cluster.NODEGROUP_LABEL
    assert {out.nodes[n][group] for n in a.pods.values()} == {cheap}, a.pods
    assert {out.nodes[n][group] for n in b.pods.values()} == {dear}, b.pods


@pytest.mark.timeout(60)
async def test_scenario_7_slow_node_admitted_once_its_slices_are_verified(
        ran: Ran, request: pytest.FixtureRequest) -> None:
    builtin, fit = ran.outcome(request, "7")
    print("\n" + figures.table([figures.record(builtin.row()), figures.record(fit.row())]))
    # Both gangs run in the end (the delay is shorter than a booking) ...
    assert builtin.running is not None and fit.running is not None, (builtin, fit)
    assert builtin.slices is not None and fit.slices is not None, (builtin, fit)
    assert builtin.admitted is not None and fit.admitted is not None, (builtin, fit)
    # ... but Kueue's check admitted before the node had any device, its pod Pending
    # with quota held; fitgate admitted only once the slices were there and verified.
    assert builtin.admitted < builtin.slices, builtin
    assert fit.admitted >= fit.slices, fit
