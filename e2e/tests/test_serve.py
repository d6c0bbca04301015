"""`fitgate serve` as a local process against the real control plane.

The process runs with the token of a ServiceAccount bound to the ClusterRole generated
from `admission/kube/rbac.py` (`rbac.cluster_role()`), so a call fitgate makes that the
table does not declare fails here as it would in a cluster. Checked: the informers sync
and /readyz turns ready; fitgate's AdmissionCheck gets `Active=True` (and a check with bad
parameters `BadParametersRef`); the Lease is held; SIGTERM releases it and the process
exits 0; a restarted process acquires it again at once.

Also here: `ApiClient` itself against the real API server (errors mapped, update guarded
by resourceVersion, server-side apply to a status subresource, lists, watches). 410 Gone
is not provoked here (etcd serves old revisions until it compacts, every few minutes);
the cache's handling of it is unit-tested, and `client.error_of` maps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from admission.kube import client, errors, kinds, rbac
from e2e import harness, kube, runner
from e2e.cluster.local import cluster

pytestmark = [pytest.mark.e2e]

CONTROLLER = "fitgate.io/topology-fit"
KUEUE = "kueue.x-k8s.io/v1beta2"


Created = list[tuple[str, str, str]]  # (apiVersion, kind, name) of cluster-scoped objects


@pytest.fixture
async def created(e2e: harness.Harness) -> AsyncIterator[Created]:
    """Cluster-scoped objects a test made, deleted after it."""
    objects: Created = []
    yield objects
    for api_version, kind, name in reversed(objects):
        await e2e.kube.delete(api_version, kind, name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _bind_service_account(e2e: harness.Harness, local_cluster: cluster.LocalCluster,
                                created: Created) -> pathlib.Path:
    """A ServiceAccount bound to `rbac.cluster_role()`; returns a kubeconfig holding its
    token (the harness's `token_for`)."""
    ns = e2e.namespace
    name = f"fitgate-{ns}"
    await e2e.kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "fitgate", "namespace": ns}})
    for obj in (rbac.cluster_role(name), {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "fitgate", "namespace": ns}]}):
        created.append((str(obj["apiVersion"]), str(obj["kind"]), name))
        await e2e.kube.apply(obj)
    return local_cluster.token_for("fitgate", ns).kubeconfig


async def _serve(e2e: harness.Harness, kubeconfig: pathlib.Path, identity: str
                 ) -> tuple[runner.LocalProcess, int]:
    """`fitgate serve` as a process of this test; returns once /readyz answers 200."""
    port = _free_port()
    argv = [sys.executable, "-m", "admission.app.cli", "serve",
            "--kubeconfig", str(kubeconfig), "--namespace", e2e.namespace,
            "--lease-name", "fitgate", "--identity", identity,
            "--health-address", "127.0.0.1", "--health-port", str(port),
            "--lease-duration", "15", "--renew-deadline", "10", "--retry-period", "1"]
    proc = await e2e.start_process(f"fitgate-serve-{identity}", argv,
                                   env={"PYTHONUNBUFFERED": "1"},
                                   ready_url=f"http://127.0.0.1:{port}/readyz", timeout=90)
    return proc, port


def _lines(proc: runner.LocalProcess) -> list[dict[str, Any]]:
    out = []
    for line in proc.log_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


async def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/readyz") as r:
        return r.status, json.loads(await r.text())


async def _lease_holder(e2e: harness.Harness) -> str | None:
    lease = await e2e.kube.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{e2e.namespace}/leases/fitgate")
    return str(lease.get("spec", {}).get("holderIdentity") or "")


@pytest.mark.timeout(240)
async def test_serve_syncs_activates_the_check_and_hands_the_lease_over(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster, created: Created
) -> None:
    kubeconfig = await _bind_service_account(e2e, local_cluster, created)
    check, bad = f"fit-{e2e.namespace}", f"bad-{e2e.namespace}"
    for name, params in ((check, None), (bad, {"apiGroup": "fitgate.io",
                                                "kind": "FitPolicy", "name": "missing"})):
        spec: dict[str, Any] = {"controllerName": CONTROLLER}
        if params:
            spec["parameters"] = params
        created.append((KUEUE, "AdmissionCheck", name))
        await e2e.kube.apply({"apiVersion": KUEUE, "kind": "AdmissionCheck",
                              "metadata": {"name": name}, "spec": spec})

    async def held_by(who: str) -> bool:
        return await _lease_holder(e2e) == who

    # Informers sync, /readyz turns 200 (start_process waited for it).
    first, port = await _serve(e2e, kubeconfig, "replica-1")
    status, body = await _readyz(port)
    assert status == 200, body
    informers = body["informers"]
    for kind in ("Node", "Pod", "ResourceSlice", "Workload", "AdmissionCheck",
                 "ClusterQueue", "ProvisioningRequest", "Job"):
        assert informers[kind] == "synced", informers
    # fitgate's own CRDs are optional: without them (the local cluster does not install
    # them; the chart tests do, and helm leaves CRDs behind) the kind is reported as not
    # served, not fatal.
    crd = await e2e.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                             "nodeshapes.fitgate.io")
    if crd is None:
        assert "not served" in informers["NodeShape"], informers
    else:
        assert informers["NodeShape"] == "synced", informers

    async def active(name: str) -> dict[str, Any] | None:
        return kube.condition(await e2e.kube.get(KUEUE, "AdmissionCheck", name), "Active")
    ok = await e2e.wait_for(lambda: active(check), 60, "Active on the check")
    assert (ok["status"], ok["reason"]) == ("True", "Active")
    refused = await e2e.wait_for(lambda: active(bad), 30, "Active on the bad check")
    assert (refused["status"], refused["reason"]) == ("False", "BadParametersRef")
    assert "FitPolicy 'missing'" in refused["message"]
    ac = await e2e.kube.get(KUEUE, "AdmissionCheck", check)
    assert ac is not None
    assert "fitgate" in {m["manager"] for m in ac["metadata"].get("managedFields", [])
                         if m.get("subresource") == "status"}
    await e2e.wait_for(lambda: held_by("replica-1"), 30, "the Lease held")

    # SIGTERM: exit 0, Lease released.
    assert await first.stop() == 0, first.log_tail()
    assert await _lease_holder(e2e) == "", "SIGTERM must release the Lease"
    events = [r.get("event") for r in _lines(first)]
    assert "lease.released" in events and "serve.stopped" in events

    # A restarted process takes the released Lease at once (no lease_duration wait).
    second, port = await _serve(e2e, kubeconfig, "replica-2")
    await e2e.wait_for(lambda: held_by("replica-2"), 20, "the Lease re-acquired")
    assert (await _readyz(port))[0] == 200
    assert await second.stop() == 0, second.log_tail()
    assert not [r for r in _lines(first) + _lines(second) if r.get("level") == "error"]


@pytest.mark.timeout(120)
async def test_api_client_against_the_api_server(e2e: harness.Harness,
                                                 kubeconfig: pathlib.Path) -> None:
    api = await client.ApiClient.connect(str(kubeconfig))
    ns = e2e.namespace
    try:
        with pytest.raises(errors.NotFound):
            await api.get(kinds.LEASE, "nope", ns)
        made = await api.create(kinds.LEASE, {"metadata": {"name": "l", "namespace": ns},
                                              "spec": {"holderIdentity": "a"}})
        with pytest.raises(errors.AlreadyExists):
            await api.create(kinds.LEASE, {"metadata": {"name": "l", "namespace": ns}})
        updated = await api.update(kinds.LEASE, {"metadata": made["metadata"],
                                                 "spec": {"holderIdentity": "b"}})
        assert updated["spec"]["holderIdentity"] == "b"
        with pytest.raises(errors.Conflict):  # made's resourceVersion is stale now
            await api.update(kinds.LEASE, {"metadata": made["metadata"],
                                           "spec": {"holderIdentity": "c"}})
        patched = await api.patch(kinds.LEASE, "l", {"spec": {"leaseDurationSeconds": 7}},
                                  namespace=ns)
        assert patched["spec"]["leaseDurationSeconds"] == 7

        # Paged list (limit 500 per page) and a watch from the list's resourceVersion.
        labels = {"app.kubernetes.io/managed-by": "fitgate"}
        for i in range(3):
            await api.create(kinds.POD_TEMPLATE, {
                "metadata": {"name": f"t{i}", "namespace": ns, "labels": labels},
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}})
        listing = await api.list(kinds.POD_TEMPLATE, ns,
                                 label_selector="app.kubernetes.io/managed-by=fitgate")
        assert sorted(o["metadata"]["name"] for o in listing.items) == ["t0", "t1", "t2"]
        assert all(o["kind"] == "PodTemplate" for o in listing.items)
        seen: list[tuple[str, str]] = []

        async def consume() -> None:
            async for ev in api.watch(kinds.POD_TEMPLATE, listing.resource_version, ns):
                if ev.type != "BOOKMARK":
                    seen.append((ev.type, ev.object["metadata"]["name"]))
                if len(seen) == 2:
                    return
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)
        await api.delete(kinds.POD_TEMPLATE, "t0", ns)
        await api.create(kinds.POD_TEMPLATE, {
            "metadata": {"name": "t3", "namespace": ns},
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}})
        await asyncio.wait_for(task, 30)
        assert seen == [("DELETED", "t0"), ("ADDED", "t3")]
        with pytest.raises(errors.Conflict):
            await asyncio.wait_for(
                api.delete(kinds.POD_TEMPLATE, "t1", ns, precondition_uid="not-its-uid"), 30)

        # Server-side apply to a status subresource, as fitgate's field manager.
        name = f"ac-{ns}"
        await e2e.kube.apply({"apiVersion": KUEUE, "kind": "AdmissionCheck",
                              "metadata": {"name": name},
                              "spec": {"controllerName": "example.com/other"}})
        try:
            out = await api.apply(kinds.ADMISSION_CHECK, {
                "metadata": {"name": name}, "status": {"conditions": [{
                    "type": "Active", "status": "False", "reason": "Test",
                    "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                field_manager="fitgate-e2e-client", subresource="status", force=True)
            assert kube.condition(out, "Active") is not None
        finally:
            await e2e.kube.delete(KUEUE, "AdmissionCheck", name)
        with pytest.raises(rbac.Undeclared):
            await api.delete(kinds.NODE, "any")
    finally:
        await api.close()


@pytest.mark.timeout(240)
async def test_serve_rides_out_an_api_server_restart(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster, created: Created) -> None:
    """The watches reconnect after the API server goes away and comes back: a check made
    after the restart turns Active, and the process stayed ready throughout."""
    kubeconfig = await _bind_service_account(e2e, local_cluster, created)
    serve, port = await _serve(e2e, kubeconfig, "replica-1")

    async def held() -> bool:
        return await _lease_holder(e2e) == "replica-1"
    await e2e.wait_for(held, 30, "the Lease held")
    # On this (the main) thread: the restarted API server gets SIGKILL when the thread
    # that started it ends (PR_SET_PDEATHSIG is per thread), so not from a worker thread.
    local_cluster.restart_apiserver()

    after = f"after-{e2e.namespace}"
    created.append((KUEUE, "AdmissionCheck", after))
    await e2e.kube.apply({"apiVersion": KUEUE, "kind": "AdmissionCheck",
                          "metadata": {"name": after}, "spec": {"controllerName": CONTROLLER}})

    async def active() -> bool:
        ac = await e2e.kube.get(KUEUE, "AdmissionCheck", after)
        return kube.has_condition(ac, "Active")
    await e2e.wait_for(active, 90, "Active on a check made after the restart")

    assert serve.alive()
    assert (await _readyz(port))[0] == 200
    events = [r.get("event") for r in _lines(serve)]
    assert "informer.reconnect" in events or "informer.gone" in events, serve.log_tail()
    assert await serve.stop() == 0, serve.log_tail()
