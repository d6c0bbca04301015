"""Uninstall with work in flight (#21 item 7): nothing stays behind fitgate's gates and
none of its ProvisioningRequests or PodTemplates is left.

On the local control plane the chart runs in local development mode, where no pod of the
chart runs (kwok's nodes start no container), so the uninstall hook Job cannot run there.
The test does what the hook does, as the hook would: it renders the chart's hook objects
(the ServiceAccount and its RBAC), applies them, and runs the hook container's own argv
(`fitgate release --all`) with a token of that ServiceAccount, once while fitgate still
runs (pre-delete) and once after `helm uninstall` (post-delete). So the command, the
hook's argv and the hook's RBAC are exercised against the real API server and Kueue.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
import yaml

from admission.gate import predicates as gating
from e2e import builders, harness
from e2e.cluster.local import cluster
from e2e.scenarios import fitgate, topology

pytestmark = [pytest.mark.e2e]

MANAGED = "app.kubernetes.io/managed-by=fitgate"


async def _owned(e2e: harness.Harness, kind: str, api_version: str) -> list[str]:
    return [o["metadata"]["name"] for o in await e2e.kube.list(
        api_version, kind, e2e.namespace, label_selector=MANAGED)]


def _hook_objects(fg: fitgate.Fitgate) -> list[dict[str, Any]]:
    out = fg.helm("template", fitgate.RELEASE, str(fitgate.CHART), "--namespace",
                  fg.namespace).stdout
    return [d for d in yaml.safe_load_all(out) if d and "helm.sh/hook" in (
        (d.get("metadata") or {}).get("annotations") or {})]


async def _run_hook(local: cluster.LocalCluster, argv: list[str], account: str,
                    namespace: str) -> dict[str, Any]:
    creds = local.token_for(account, namespace, duration="10m")
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "admission.app.cli", *argv, "-o", "json",
                         f"--kubeconfig={creds.kubeconfig}"],
        capture_output=True, text=True, timeout=120, check=False, cwd=fitgate.REPO)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


@pytest.mark.timeout(480)
async def test_uninstall_releases_gated_jobs_and_leaves_no_request_or_template(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    fg = fitgate.Fitgate(e2e, local_cluster)
    hook_objects: list[dict[str, Any]] = []
    ns = e2e.namespace
    try:
        await fg.install()
        await topology.create_claim_template(e2e)
        await topology.create_shapes(e2e)
        queue = await e2e.create_queues(f"uninstall-{ns}", admission_checks=[fitgate.CHECK_NAME])
        # In flight: with the autoscaler stopped, fitgate's request for the gang stays
        # unanswered, with its PodTemplates.
        local_cluster.stop_autoscaler()
        await topology.submit_gang(e2e, "fitgate", queue)

        async def in_flight() -> bool:
            return bool(await _owned(e2e, "ProvisioningRequest", builders.AUTOSCALING)
                        and await _owned(e2e, "PodTemplate", "v1"))
        await e2e.wait_for(in_flight, 90, "fitgate's request and templates for the gang")
        # Gated: a Job that can never fit is held at fitgate's pre-quota gate.
        await e2e.kube.create(builders.claim_template("never", ns, 64,
                                                      match_attribute=builders.PCIE_ROOT))
        await e2e.kube.create(builders.job("never", ns, queue, claim_template_name="never"))

        async def held() -> bool:
            job = await e2e.kube.get("batch/v1", "Job", "never", ns)
            return bool(job) and gating.gated_by_us(job or {}) and \
                gating.EXPLANATION in gating.annotations_of(job or {})
        await e2e.wait_for(held, 90, "the gate to hold the Job that can never fit")

        # The hook's objects, as helm would create them before the Job.
        hook_objects = _hook_objects(fg)
        (job_spec,) = [o for o in hook_objects if o["kind"] == "Job"]
        (account,) = [o["metadata"]["name"] for o in hook_objects
                      if o["kind"] == "ServiceAccount"]
        for obj in hook_objects:
            if obj["kind"] != "Job":
                await e2e.kube.apply(obj)
        (container,) = job_spec["spec"]["template"]["spec"]["containers"]
        argv = list(container["args"])

        # pre-delete: fitgate still runs.
        before = await _run_hook(local_cluster, argv, account, fg.namespace)
        assert f"Job {ns}/never" in before["jobs"], before
        assert before["provisioning_requests"] and before["pod_templates"], before
        # The ClusterQueue (named as its LocalQueue) still uses the check: reported.
        assert before["cluster_queues"] == {queue: [fitgate.CHECK_NAME]}, before

        # helm uninstall: fitgate's replicas stop, the release's objects go.
        for proc in fg.replicas:
            await proc.stop()
        fg.helm("uninstall", fitgate.RELEASE, "--namespace", fg.namespace, "--no-hooks",
                "--timeout", "60s")
        fg.installed = False
        # post-delete: whatever fitgate did between the two runs is undone too.
        await _run_hook(local_cluster, argv, account, fg.namespace)

        never = await e2e.kube.get("batch/v1", "Job", "never", ns)
        assert never is not None
        assert not gating.gated_by_us(never), never["metadata"]
        assert await _owned(e2e, "ProvisioningRequest", builders.AUTOSCALING) == []
        assert await _owned(e2e, "PodTemplate", "v1") == []

        # Kueue drops the gate from the Workload once its Job has none.
        async def workload_ungated() -> bool:
            wl = await e2e.workload_of_job("never")
            return wl is not None and not gating.gated_by_us(wl)
        await e2e.wait_for(workload_ungated, 60, "Kueue to ungate the Workload of 'never'")
        # Idempotent: a third run finds nothing to do.
        again = await _run_hook(local_cluster, argv, account, fg.namespace)
        assert (again["jobs"], again["pods"], again["provisioning_requests"],
                again["pod_templates"]) == ([], [], [], [])
    finally:
        if "cluster-autoscaler" in local_cluster.stopped:
            local_cluster.start_autoscaler()
        await fg.uninstall()
        for obj in hook_objects:
            if obj["kind"] != "Job":
                meta = obj["metadata"]
                await e2e.kube.delete(obj["apiVersion"], obj["kind"], meta["name"],
                                      meta.get("namespace"))

