"""Upgrade from the previous chart with work in flight (#21 item 7).

The previous chart is the repository's chart at ``PREVIOUS_CHART``: the last commit of
the chart before the monitoring values and the uninstall hook were added (bump it when the
chart's version changes). It is installed in local development mode with ``fitgate
serve`` running, a gang waits on fitgate's unanswered ProvisioningRequest (the autoscaler
is stopped) and a Job that can never fit is held at the gate. Then ``helm upgrade
--reset-then-reuse-values`` to this chart, as docs/platform-guide.md says, and fitgate is
restarted: the held Job stays held, the request is neither duplicated nor orphaned, and
once the autoscaler answers the gang runs.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import tarfile
from typing import Any

import pytest
import yaml

from admission.gate import predicates as gating
from e2e import builders, harness
from e2e.cluster.local import cluster
from e2e.scenarios import fitgate, many, topology

pytestmark = [pytest.mark.e2e]

PREVIOUS_CHART = "cb9a5ef01e501345ba95a516abc31d1c22ddd014"
MANAGED = "app.kubernetes.io/managed-by=fitgate"


def previous_chart(into: pathlib.Path) -> pathlib.Path:
    """charts/fitgate as of PREVIOUS_CHART, exported from git."""
    archive = into / "previous.tar"
    proc = subprocess.run(["git", "archive", "--format=tar", f"--output={archive}",
                           PREVIOUS_CHART, "charts/fitgate"], cwd=fitgate.REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"],
                                 cwd=fitgate.REPO, capture_output=True, text=True, timeout=60,
                                 check=False).stdout.strip() == "true"
        if shallow:  # a depth-limited clone has no earlier chart to upgrade from
            pytest.skip(f"shallow clone: commit {PREVIOUS_CHART} (the previous chart) is "
                        "not in it; `git fetch --unshallow` to run this test")
        pytest.fail(f"the previous chart (commit {PREVIOUS_CHART}) is not in this "
                    f"repository's history: {proc.stderr.strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "charts" / "fitgate"


def _crds(chart: pathlib.Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(f.read_text()) for f in sorted((chart / "crds").glob("*.yaml"))]


async def _requests(e2e: harness.Harness) -> list[dict[str, Any]]:
    return await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest", e2e.namespace,
                               label_selector=MANAGED)


@pytest.mark.timeout(600)
async def test_upgrade_from_the_previous_chart_with_jobs_in_flight(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster,
        tmp_path: pathlib.Path) -> None:
    fg = fitgate.Fitgate(e2e, local_cluster)
    ns = e2e.namespace
    previous = previous_chart(tmp_path)
    try:
        # The cluster as the previous release left it: its CRDs (Helm never upgrades CRDs;
        # the harness applied today's, which differ, with its own field manager).
        local_cluster.apply(_crds(previous))
        await fg.install(chart=previous)
        await topology.create_claim_template(e2e)
        await topology.create_shapes(e2e)
        queue = await e2e.create_queues(f"upgrade-{ns}", admission_checks=[fitgate.CHECK_NAME])
        local_cluster.stop_autoscaler()
        gang, _ = await topology.submit_gang(e2e, "fitgate", queue)

        async def in_flight() -> list[dict[str, Any]] | None:
            return await _requests(e2e) or None
        (before,) = await e2e.wait_for(in_flight, 90, "fitgate's request for the gang")
        await e2e.kube.create(builders.claim_template("never", ns, 64,
                                                      match_attribute=builders.PCIE_ROOT))
        await e2e.kube.create(builders.job("never", ns, queue, claim_template_name="never"))

        async def held() -> bool:
            job = await e2e.kube.get("batch/v1", "Job", "never", ns)
            return bool(job) and gating.EXPLANATION in gating.annotations_of(job or {})
        await e2e.wait_for(held, 90, "the gate to hold the Job that can never fit")

        # The upgrade, then fitgate restarted on the new release's configuration.
        for proc in fg.replicas:
            await proc.stop()
        await asyncio.to_thread(
            fg.helm, "upgrade", fitgate.RELEASE, str(fitgate.CHART), "--namespace",
            fg.namespace, "--reset-then-reuse-values", "--wait", "--timeout", "120s")
        await fg.write_chart_config()
        await fg.start(0)
        await fg.wait_active()

        never = await e2e.kube.get("batch/v1", "Job", "never", ns)
        assert never is not None and gating.gated_by_us(never), "the upgrade released a gate"
        # The same request, not a second one; it is answered once the autoscaler runs.
        assert [r["metadata"]["name"] for r in await _requests(e2e)] == [
            before["metadata"]["name"]]
        local_cluster.start_autoscaler()
        await e2e.running_pods(gang, topology.GANG_PODS, 240, "the gang Running after the "
                               "upgrade")
        workloads = await e2e.kube.list(builders.KUEUE, "Workload", ns)
        assert many.duplicated_or_orphaned(await _requests(e2e), workloads) == []
    finally:
        if "cluster-autoscaler" in local_cluster.stopped:
            local_cluster.start_autoscaler()
        await fg.uninstall()
        local_cluster.apply(_crds(fitgate.CHART))  # today's CRDs back, for the tests after
