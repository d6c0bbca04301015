"""Faults (issue #13): fitgate keeps its promises when parts of it fail.

fitgate is installed with its chart and runs as two ``fitgate serve`` replicas
(``e2e/scenarios/fitgate.py``): replica 0 serves the URL the chart's webhook
configurations call, replica 1 has a port of its own; the replica started first holds the
leader-election Lease and runs the controllers. The gang is scenario 1's (4 pods, 8 GPUs
on one PCIe root each, only the dear node group can host it).

Here: the leader killed after its request (two replicas); the webhook unavailable;
cluster-autoscaler stopped (the request times out into Retry at fitgate's
``provisioning_timeout``, nothing admitted, attempt 2 runs once it is back); watch expiry
(410 Gone for real: fitgate paused, etcd compacted, kube-apiserver restarted; it lists
again and keeps deciding); kube-apiserver restarted while a gang's request is
outstanding.

Covered elsewhere: serve killed after planning, after creating its ProvisioningRequest,
after Provisioned and during verification (``test_check.py``); serve riding out an API
server restart with no gang in flight (``test_serve.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any

import pytest

from e2e import builders, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import fitgate, many, topology

pytestmark = [pytest.mark.e2e]

GATE = "kueue.x-k8s.io/admission-gated-by"


def crash(fg: fitgate.Fitgate, index: int) -> None:
    """SIGKILL a replica's process group: no Lease release, no cleanup."""
    pid = fg.replicas[index].pid
    assert pid is not None
    os.killpg(os.getpgid(pid), signal.SIGKILL)


async def fitgate_requests(e2e: harness.Harness) -> list[dict[str, Any]]:
    return await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest", e2e.namespace,
                               label_selector="app.kubernetes.io/managed-by=fitgate")


def queue_name(e2e: harness.Harness) -> str:
    return f"faults-{e2e.namespace}"


async def setup_queue(e2e: harness.Harness) -> str:
    await topology.create_claim_template(e2e)
    await topology.create_shapes(e2e)
    return await e2e.create_queues(queue_name(e2e), admission_checks=[fitgate.CHECK_NAME])


@pytest.mark.timeout(480)
async def test_leader_killed_after_its_request_the_other_replica_finishes_the_gang(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    fg = fitgate.Fitgate(e2e, local_cluster)
    try:
        # Replica 1 leads; replica 0 (the webhook URL) follows.
        await fg.install(replicas=2, order=(1, 0))
        assert await fg.leader() == "e2e-1"
        queue = await setup_queue(e2e)
        job, _ = await topology.submit_gang(e2e, "fitgate", queue)

        async def one_request() -> list[dict[str, Any]] | None:
            return await fitgate_requests(e2e) or None
        before = await e2e.wait_for(one_request, 90, "the leader's ProvisioningRequest")
        crash(fg, 1)

        async def new_leader() -> bool:
            return await fg.leader() == "e2e-0"
        await e2e.wait_for(new_leader, 60, "replica 0 takes the Lease over")

        pods = await e2e.running_pods(job, topology.GANG_PODS, 240,
                                      "the gang Running under the new leader")
        after = await fitgate_requests(e2e)
        workloads = await e2e.kube.list(builders.KUEUE, "Workload", e2e.namespace)
        assert many.duplicated_or_orphaned(after, workloads) == []
        assert {r["metadata"]["name"] for r in after} <= {
            r["metadata"]["name"] for r in before}, "the new leader asked again"
        dear = topology.group_name("fitgate", "dear")
        assert {p["spec"]["nodeName"].rsplit("-", 1)[0] for p in pods} == {dear}
    finally:
        await fg.uninstall()


@pytest.mark.timeout(480)
async def test_webhook_unavailable_the_gate_is_skipped_and_the_check_still_enforces(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    fg = fitgate.Fitgate(e2e, local_cluster)
    try:
        await fg.install(replicas=2, order=(1, 0))
        crash(fg, 0)  # the replica behind the webhook URL: connection refused
        queue = await setup_queue(e2e)
        # Too big for every node and NodeShape: 16 GPUs on one PCIe root.
        await e2e.kube.create(builders.claim_template(
            "sixteen-gpus-one-root", e2e.namespace, 16, match_attribute=builders.PCIE_ROOT))
        await e2e.create_job("never", queue, claim_template_name="sixteen-gpus-one-root",
                             node_selector={topology.RUN_LABEL: "s1-fitgate"})
        job, _ = await topology.submit_gang(e2e, "fitgate", queue)

        # The mutating webhook failed open: neither Job carries fitgate's gate.
        for name in ("never", job):
            obj = await e2e.kube.get("batch/v1", "Job", name, e2e.namespace)
            assert obj is not None
            gates = (obj["metadata"].get("annotations") or {}).get(GATE, "")
            assert "fitgate.io/topology-fit" not in gates, obj["metadata"]

        def state(wl: dict[str, Any] | None) -> str | None:
            for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
                if entry.get("name") == fitgate.CHECK_NAME:
                    return str(entry.get("state"))
            return None

        def rejected(wl: dict[str, Any] | None) -> bool:
            """fitgate rejected it: the state itself, or Kueue's answer to it (the
            Workload deactivated, the check's state reset)."""
            evicted = kube.condition(wl, "Evicted") or {}
            return state(wl) == "Rejected" or (
                evicted.get("reason") == "DeactivatedDueToAdmissionCheck"
                and fitgate.CHECK_NAME in str(evicted.get("message")))

        # The check decides both: the gang that can be placed is Ready (admitted) on new
        # dear nodes; the one that can never fit is rejected and never admitted.
        async def decided() -> tuple[dict[str, Any], dict[str, Any]] | None:
            ok = await e2e.workload_of_job(job)
            bad = await e2e.workload_of_job("never")
            # Admitted follows Ready by a moment (Kueue admits once every check is Ready).
            if state(ok) == "Ready" and kube.has_condition(ok, "Admitted") and rejected(bad):
                assert ok is not None and bad is not None
                return ok, bad
            return None
        ok, bad = await e2e.wait_for(decided, 240, "fitgate's check decides both gangs")
        assert kube.has_condition(ok, "Admitted")
        assert not kube.has_condition(bad, "Admitted")
        assert not kube.has_condition(bad, "QuotaReserved")
        # Admitted, but its pods wait for the webhook: the Pod hook fails closed
        # (failurePolicy Fail), so no pod of the gang lands where the plan did not put it.
        assert await e2e.pods_of_job(job) == []
    finally:
        await fg.uninstall()


REQUEST_TIMEOUT_S = 30  # fitgate's provisioning_timeout in the autoscaler test


def attempt_of(request: dict[str, Any]) -> str:
    return str((request["metadata"].get("labels") or {}).get("fitgate.io/attempt"))


async def fitgate_templates(e2e: harness.Harness) -> list[str]:
    templates = await e2e.kube.list("v1", "PodTemplate", e2e.namespace,
                                    label_selector="app.kubernetes.io/managed-by=fitgate")
    return sorted(t["metadata"]["name"] for t in templates)


@pytest.mark.timeout(480)
async def test_autoscaler_stopped_requests_time_out_into_retry_and_nothing_is_admitted(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With cluster-autoscaler down, fitgate's request goes unanswered; after fitgate's
    deadline (``provisioning_timeout``, here 30 s) the request and its PodTemplates are
    deleted and the check goes to Retry, nothing admitted. Kueue evicts and requeues the
    Workload after the backoff (60 s) with retryCount 1; with the autoscaler back, attempt 2's
    request is answered and the gang runs on verified nodes, with no duplicate or orphaned
    request and no template left of attempt 1."""
    # The environment overrides the chart's config file (admission/config.py).
    monkeypatch.setenv("FITGATE_PROVISIONING_TIMEOUT", str(REQUEST_TIMEOUT_S))
    fg = fitgate.Fitgate(e2e, local_cluster)
    try:
        await fg.install()
        queue = await setup_queue(e2e)
        local_cluster.stop_autoscaler()
        job, _ = await topology.submit_gang(e2e, "fitgate", queue)

        async def first_request() -> list[dict[str, Any]] | None:
            return await fitgate_requests(e2e) or None
        (first,) = await e2e.wait_for(first_request, 90, "fitgate's request (attempt 1)")
        assert attempt_of(first) == "1"
        assert not kube.has_condition(first, "Accepted")
        first_name = first["metadata"]["name"]
        templates = await fitgate_templates(e2e)
        assert templates and all(first_name in t for t in templates), templates

        # Until the deadline and past it: never admitted, no node added, no second request
        # of attempt 1; then the request and its templates are gone and the check retried.
        async def timed_out() -> bool:
            wl = await e2e.workload_of_job(job)
            nodes = await e2e.kube.list(
                "v1", "Node", label_selector=f"{topology.RUN_LABEL}=s1-fitgate")
            assert not kube.has_condition(wl, "Admitted"), "admitted without the autoscaler"
            assert not nodes, "nodes added without the autoscaler"
            requests = await fitgate_requests(e2e)
            assert [r["metadata"]["name"] for r in requests] in ([first_name], []), requests
            return not requests and not await fitgate_templates(e2e)
        await e2e.wait_for(timed_out, REQUEST_TIMEOUT_S + 60,
                           "the unanswered request deleted at fitgate's deadline")
        said = (f"ProvisioningRequest {first_name} was neither accepted nor provisioned "
                f"after waiting")
        log = fg.replicas[0].log_text()
        retried = [line for line in log.splitlines() if said in line and "Retry" in line]
        assert retried, f"no Retry naming {first_name} in fitgate's log"
        assert f"(deadline {REQUEST_TIMEOUT_S}s)" in retried[0]

        local_cluster.start_autoscaler()

        # The backoff (60 s), then attempt 2 is provisioned and verified.
        pods = await e2e.running_pods(job, topology.GANG_PODS, 240,
                                      "the gang Running on attempt 2")
        done = await e2e.workload_of_job(job)
        assert done is not None
        (entry,) = [e for e in done["status"]["admissionChecks"]
                    if e["name"] == fitgate.CHECK_NAME]
        assert entry["state"] == "Ready" and entry.get("retryCount") == 1, entry
        second = f"{first_name[:-len('-1')]}-2"
        assert entry["message"].startswith(
            f"verified on the nodes of ProvisioningRequest {second}"), entry["message"]
        dear = topology.group_name("fitgate", "dear")
        assert {p["spec"]["nodeName"].rsplit("-", 1)[0] for p in pods} == {dear}
        after = await fitgate_requests(e2e)
        workloads = await e2e.kube.list(builders.KUEUE, "Workload", e2e.namespace)
        assert many.duplicated_or_orphaned(after, workloads) == []
        assert {r["metadata"]["name"] for r in after} <= {second}, after
        assert all(second in t for t in await fitgate_templates(e2e))
        # Kueue evicted the Workload once for the Retry (at requeueAt: it keeps the quota
        # reserved through the backoff), and admitted it once, on attempt 2.
        events = await e2e.kube.list("events.k8s.io/v1", "Event", e2e.namespace)
        evictions = [ev for ev in events if ev.get("reason") == "EvictedDueToAdmissionCheck"]
        assert len(evictions) == 1 and first_name in evictions[0]["note"], evictions
    finally:
        await fg.uninstall()


def informer_log(proc_log: str, event: str) -> list[dict[str, Any]]:
    """fitgate's JSON log lines of one informer event (``informer.gone``, ...)."""
    out = []
    for line in proc_log.splitlines():
        if f'"{event}"' not in line:
            continue
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


@pytest.mark.timeout(300)
async def test_watch_expiry_fitgate_relists_and_keeps_deciding(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    """fitgate's watches expire for real: fitgate is paused (SIGSTOP) while a node it has
    never seen is added; etcd's history is compacted up to the current revision and
    kube-apiserver restarted, so neither the API server's new watch cache nor etcd can
    serve fitgate's old resourceVersions. Resumed (SIGCONT), its watches get 410 Gone, it
    lists again, and a Job submitted afterwards is decided on the node it missed.

    What answers 410 on this control plane is the restarted API server's watch cache: it
    starts from the revision it lists at start, and a watch from an older resourceVersion
    gets "too old resource version: <rv> (<oldest>)" (the reason fitgate logs, for every
    kind). Compaction alone is not expected to (not tried alone here): a running API
    server serves watches from its cache, not from etcd. The compaction makes etcd refuse
    the same resourceVersions too, should the API server pass a watch through to it while
    its cache is initializing."""
    fg = fitgate.Fitgate(e2e, local_cluster)
    try:
        await fg.install()
        queue = await setup_queue(e2e)
        proc = fg.replicas[0]
        assert proc.pid is not None
        group = os.getpgid(proc.pid)
        os.killpg(group, signal.SIGSTOP)
        try:
            (node,) = await e2e.create_node_pool("watch-gpu", 1, builders.gpu_devices(
                topology.GPUS_PER_POD, per_pcie_root=topology.GPUS_PER_POD))
            local_cluster.compact_etcd()
            local_cluster.restart_apiserver()
        finally:
            os.killpg(group, signal.SIGCONT)

        async def relisted() -> list[dict[str, Any]] | None:
            text = proc.log_text()
            gone = {x.get("kind") for x in informer_log(text, "informer.gone")}
            again = {x.get("kind") for x in informer_log(text, "informer.relisted")}
            return informer_log(text, "informer.gone") if {"Node", "ResourceSlice"} <= (
                gone & again) else None
        gone = await e2e.wait_for(relisted, 90, "fitgate's Node and ResourceSlice informers "
                                  "get 410 Gone and list again")
        reasons = sorted({str(x.get("error")) for x in gone})
        print(f"[faults] 410 Gone for {sorted({str(x.get('kind')) for x in gone})}: {reasons}")
        assert all("410" in r or "too old" in r or "compacted" in r for r in reasons), reasons

        # A Job that only the node added while fitgate was paused can host: decided there.
        await e2e.create_job("after-relist", queue, parallelism=1,
                             claim_template_name=topology.CLAIM_TEMPLATE,
                             node_selector={cluster.SHAPE_LABEL: "watch-gpu"})

        async def admitted() -> dict[str, Any] | None:
            wl = await e2e.workload_of_job("after-relist")
            return wl if kube.has_condition(wl, "Admitted") else None
        wl = await e2e.wait_for(admitted, 60, "the Job submitted after the relist admitted")
        (entry,) = [e for e in wl["status"]["admissionChecks"]
                    if e["name"] == fitgate.CHECK_NAME]
        assert entry["message"].startswith(
            f"fits on existing nodes: 1 pods on 1 nodes ({node})"), entry["message"]
        assert await fitgate_requests(e2e) == []
    finally:
        await fg.uninstall()


@pytest.mark.timeout(300)
async def test_api_server_restarted_while_a_gangs_request_is_outstanding(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    """kube-apiserver restarts while a gang's ProvisioningRequest is outstanding (the
    autoscaler held back so the request cannot be answered first). fitgate's watches
    reconnect, the autoscaler's answer reaches it through them, and the gang is admitted
    on verified nodes with the same, single request."""
    fg = fitgate.Fitgate(e2e, local_cluster)
    try:
        await fg.install()
        queue = await setup_queue(e2e)
        local_cluster.stop_autoscaler()
        job, _ = await topology.submit_gang(e2e, "fitgate", queue)

        async def outstanding() -> dict[str, Any] | None:
            wl = await e2e.workload_of_job(job)
            waiting = any("waiting for the autoscaler" in str(e.get("message"))
                          for e in ((wl or {}).get("status") or {}).get("admissionChecks")
                          or [])
            requests = await fitgate_requests(e2e)
            return requests[0] if waiting and len(requests) == 1 else None
        before = await e2e.wait_for(outstanding, 90, "the gang's request outstanding")
        local_cluster.restart_apiserver()  # on the main thread: see test_serve
        local_cluster.start_autoscaler()

        pods = await e2e.running_pods(job, topology.GANG_PODS, 180,
                                      "the gang Running after the restart")
        wl = await e2e.workload_of_job(job)
        assert wl is not None
        (entry,) = [e for e in wl["status"]["admissionChecks"]
                    if e["name"] == fitgate.CHECK_NAME]
        assert entry["message"].startswith(
            f"verified on the nodes of ProvisioningRequest {before['metadata']['name']}"), entry
        assert not entry.get("retryCount") and not kube.condition(wl, "Evicted"), wl["status"]
        after = await fitgate_requests(e2e)
        assert {r["metadata"]["uid"] for r in after} <= {before["metadata"]["uid"]}, after
        workloads = await e2e.kube.list(builders.KUEUE, "Workload", e2e.namespace)
        assert many.duplicated_or_orphaned(after, workloads) == []
        dear = topology.group_name("fitgate", "dear")
        assert {p["spec"]["nodeName"].rsplit("-", 1)[0] for p in pods} == {dear}
        assert fg.replicas[0].alive() and fg.replicas[0].starts == 1
    finally:
        await fg.uninstall()
