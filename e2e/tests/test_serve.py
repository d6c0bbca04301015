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
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from admission.kube import client, errors, kinds, rbac
from e2e import harness, kube

pytestmark = [pytest.mark.e2e]

CONTROLLER = "fitgate.io/topology-fit"
KUEUE = "kueue.x-k8s.io/v1beta2"


async def _service_account_kubeconfig(e2e: harness.Harness, admin: pathlib.Path,
                                      out: pathlib.Path) -> str:
    """A ServiceAccount bound to `rbac.cluster_role()`, and a kubeconfig holding its
    token (TokenRequest API). Returns the ClusterRole's name (cluster-scoped: the caller
    deletes it)."""
    ns = e2e.namespace
    name = f"fitgate-{ns}"
    await e2e.kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "fitgate", "namespace": ns}})
    await e2e.kube.apply(rbac.cluster_role(name))
    await e2e.kube.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "fitgate", "namespace": ns}]})
    token = await e2e.kube.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/fitgate/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    cfg = yaml.safe_load(admin.read_text())
    ctx_name = cfg["current-context"]
    ctx = next(c for c in cfg["contexts"] if c["name"] == ctx_name)["context"]
    cluster = next(c for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    out.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fitgate",
        "clusters": [cluster],
        "users": [{"name": "fitgate", "user": {"token": token["status"]["token"]}}],
        "contexts": [{"name": "fitgate", "context": {"cluster": cluster["name"],
                                                     "user": "fitgate"}}]}))
    return name


class Serve:
    """One `fitgate serve` process; its JSON log lines go to a file."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, identity: str,
                 log: pathlib.Path) -> None:
        self.log = log
        self.identity = identity
        argv = [sys.executable, "-m", "admission.cli", "serve",
                "--kubeconfig", str(kubeconfig), "--namespace", namespace,
                "--lease-name", "fitgate", "--identity", identity,
                "--health-address", "127.0.0.1", "--health-port", "0",
                "--lease-duration", "15", "--renew-deadline", "10", "--retry-period", "1"]
        self._out = log.open("w")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    async def port(self) -> int:
        async def bound() -> int | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"fitgate serve exited {self.proc.returncode}:\n"
                                     + self.log.read_text()[-4000:])
            return next((r["port"] for r in self.lines() if r.get("event") == "serve.health"),
                        None)
        return await kube.wait_for(bound, 30, "the health port in the logs")

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        port = await self.port()
        async with aiohttp.ClientSession() as s, \
                s.get(f"http://127.0.0.1:{port}/readyz") as r:
            return r.status, json.loads(await r.text())

    def terminate(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError("fitgate serve did not stop within "
                                     f"{timeout}s of SIGTERM") from None
        self._out.close()
        return self.proc.returncode


@contextlib.asynccontextmanager
async def serving(*args: Any) -> AsyncIterator[Serve]:
    proc = Serve(*args)
    try:
        yield proc
    finally:
        proc.terminate()


async def _lease_holder(e2e: harness.Harness) -> str | None:
    lease = await e2e.kube.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{e2e.namespace}/leases/fitgate")
    return str(lease.get("spec", {}).get("holderIdentity") or "")


@pytest.mark.timeout(240)
async def test_serve_syncs_activates_the_check_and_hands_the_lease_over(
        e2e: harness.Harness, kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> None:
    role = await _service_account_kubeconfig(e2e, kubeconfig, tmp_path / "sa.kubeconfig")

    async def held_by(who: str) -> bool:
        return await _lease_holder(e2e) == who

    check, bad = f"fit-{e2e.namespace}", f"bad-{e2e.namespace}"
    try:
        await e2e.kube.apply({"apiVersion": KUEUE, "kind": "AdmissionCheck",
                              "metadata": {"name": check},
                              "spec": {"controllerName": CONTROLLER}})
        await e2e.kube.apply({"apiVersion": KUEUE, "kind": "AdmissionCheck",
                              "metadata": {"name": bad},
                              "spec": {"controllerName": CONTROLLER, "parameters": {
                                  "apiGroup": "fitgate.io", "kind": "FitPolicy",
                                  "name": "missing"}}})
        first = Serve(tmp_path / "sa.kubeconfig", e2e.namespace, "replica-1",
                      tmp_path / "serve-1.log")
        try:
            async def ready() -> dict[str, Any] | None:
                status, body = await first.readyz()
                return body if status == 200 else None
            body = await e2e.wait_for(ready, 90, "/readyz 200")
            informers = body["informers"]
            for kind in ("Node", "Pod", "ResourceSlice", "Workload", "AdmissionCheck",
                         "ClusterQueue", "ProvisioningRequest", "Job"):
                assert informers[kind] == "synced", informers
            # fitgate's own CRDs are not installed here: reported, not fatal.
            assert "not served" in informers["NodeShape"]

            async def active(name: str) -> dict[str, Any] | None:
                ac = await e2e.kube.get(KUEUE, "AdmissionCheck", name)
                cond = kube.condition(ac, "Active")
                return cond if cond and cond.get("reason") != "" else None
            ok = await e2e.wait_for(lambda: active(check), 60, "Active on the check")
            assert (ok["status"], ok["reason"]) == ("True", "Active")
            refused = await e2e.wait_for(lambda: active(bad), 30, "Active on the bad check")
            assert (refused["status"], refused["reason"]) == ("False", "BadParametersRef")
            assert "FitPolicy 'missing'" in refused["message"]
            ac = await e2e.kube.get(KUEUE, "AdmissionCheck", check)
            assert ac is not None
            managers = {m["manager"] for m in ac["metadata"].get("managedFields", [])
                        if m.get("subresource") == "status"}
            assert "fitgate" in managers

            await e2e.wait_for(lambda: held_by("replica-1"), 30, "the Lease held")
        finally:
            rc = first.terminate()
        assert rc == 0, first.log.read_text()[-4000:]
        assert await _lease_holder(e2e) == "", "SIGTERM must release the Lease"
        events = [r.get("event") for r in first.lines()]
        assert "lease.released" in events and "serve.stopped" in events

        # A restarted process takes the released Lease at once (no lease_duration wait).
        async with serving(tmp_path / "sa.kubeconfig", e2e.namespace, "replica-2",
                           tmp_path / "serve-2.log") as second:
            await e2e.wait_for(lambda: held_by("replica-2"), 20, "the Lease re-acquired")
            assert (await second.readyz())[0] == 200
        assert second.proc.returncode == 0
        assert not [r for r in first.lines() + second.lines()
                    if r.get("level") == "error"]
    finally:
        for name in (check, bad):
            await e2e.kube.delete(KUEUE, "AdmissionCheck", name)
        await e2e.kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", role)
        await e2e.kube.delete("rbac.authorization.k8s.io/v1", "ClusterRole", role)


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

