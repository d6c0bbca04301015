"""The pre-quota gate on the local control plane with real Kueue.

`fitgate serve` runs as a local process with a ServiceAccount token whose ClusterRole is
exactly `rbac.PERMISSIONS` (never as admin), with the webhook's TLS certificate of a CA
made by the test. The API server reaches the webhook by URL
(`https://127.0.0.1:<port>/...`, that CA's caBundle), registered for this test's
namespace only, failurePolicy Ignore.

1. A Job whose claim asks for 3 GPUs on one PCIe root, while every node and the only
   NodeShape have 2 per root: it is created as submitted (only the gate annotation added),
   Kueue makes its Workload and never reserves quota, the gate holds it with an
   explanation, and `fitgate explain` says why (configuration: the pcieRoot constraint).
2. A Job whose claim asks for 2 GPUs on one root: the gate removes its entry from the Job,
   Kueue reserves quota, and the Workload waits on fitgate's AdmissionCheck.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import pathlib
import sys
import uuid
from typing import Any

import pytest
import yaml

from admission.gate import predicates as gating
from admission.kube import rbac
from e2e import builders, dra_driver, harness, kube
from e2e.cluster.local import processes
from tests.admission import builders as ab

pytestmark = [pytest.mark.e2e]

CRDS = pathlib.Path(__file__).resolve().parents[2] / "charts" / "fitgate" / "crds"
ADMISSION = "admissionregistration.k8s.io/v1"
# e2e.kube's table lacks fitgate's kinds (its default plural of FitPolicy is wrong).
kube.RESOURCES.setdefault("FitPolicy", ("fitpolicies", False))
kube.RESOURCES.setdefault("NodeShape", ("nodeshapes", False))


async def _install_crds(k: kube.Kube) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        await k.apply(crd)

        async def established(name: str = crd["metadata"]["name"]) -> bool:
            got = await k.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            return kube.has_condition(got, "Established")
        await kube.wait_for(established, 30, f"CRD {crd['metadata']['name']} established")


def _webhooks(name: str, namespace: str, port: int, pem: bytes) -> list[dict[str, Any]]:
    ca = base64.b64encode(pem).decode()

    def hook(hook_name: str, path: str) -> dict[str, Any]:
        return {"name": hook_name,
                "clientConfig": {"url": f"https://127.0.0.1:{port}/{path}", "caBundle": ca},
                "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"],
                           "operations": ["CREATE"], "resources": ["jobs"]}],
                "namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Ignore", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 5}

    mutating = {"apiVersion": ADMISSION, "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [{**hook("gate.jobs.fitgate.io", "mutate-jobs"),
                              "reinvocationPolicy": "Never"}]}
    validating = {"apiVersion": ADMISSION, "kind": "ValidatingWebhookConfiguration",
                  "metadata": {"name": name},
                  "webhooks": [hook("fit.jobs.fitgate.io", "validate-jobs")]}
    return [mutating, validating]


async def start_fitgate(e2e: harness.Harness, cert_dir: pathlib.Path, port: int) -> None:
    """`fitgate serve` as the chart would run it: its own ServiceAccount and RBAC."""
    assert e2e.cluster is not None
    ns = e2e.namespace
    role = rbac.cluster_role(f"fitgate-e2e-{ns}")
    await e2e.kube.apply(role)
    await e2e.kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": "fitgate", "namespace": ns}})
    await e2e.kube.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"fitgate-e2e-{ns}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"fitgate-e2e-{ns}"},
        "subjects": [{"kind": "ServiceAccount", "name": "fitgate", "namespace": ns}]})
    creds = e2e.cluster.token_for("fitgate", ns)
    health = processes.free_port()
    fitgate_bin = pathlib.Path(sys.executable).parent / "fitgate"
    await e2e.start_process("fitgate", [
        str(fitgate_bin), "serve", "--health-address", "127.0.0.1",
        "--health-port", str(health), "--webhook-address", "127.0.0.1",
        "--webhook-port", str(port),
        # Step 1 expects the warning on the first submission of its spec: the validation
        # waits for the decision, up to the review's 2 s (the default, 10 ms, allows a
        # new spec unchecked and warns from its next submission on; the unit tests in
        # tests/admission/webhook/test_review.py have that).
        "--webhook-decision-budget", "2",
        "--cert-dir", str(cert_dir), "--leader-election", "false", "--namespace", ns,
        "--log-format", "console"], env={"KUBECONFIG": str(creds.kubeconfig)},
        ready_url=f"http://127.0.0.1:{health}/readyz", timeout=90)


async def delete_quietly(k: kube.Kube, objs: list[tuple[str, str, str]]) -> None:
    for api_version, kind, name in reversed(objs):
        with contextlib.suppress(Exception):
            await k.delete(api_version, kind, name)


@pytest.mark.timeout(420)
async def test_the_gate_holds_what_can_never_fit_and_lets_through_what_can(
        e2e: harness.Harness, kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> None:
    if e2e.cluster is None:
        pytest.skip("needs the local cluster (token_for, local processes)")
    ns = e2e.namespace
    k = e2e.kube
    owned: list[tuple[str, str, str]] = [
        ("rbac.authorization.k8s.io/v1", "ClusterRole", f"fitgate-e2e-{ns}"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", f"fitgate-e2e-{ns}")]
    try:
        await run(e2e, k, ns, kubeconfig, tmp_path, owned)
    finally:
        await delete_quietly(k, owned)


async def run(e2e: harness.Harness, k: kube.Kube, ns: str, kubeconfig: pathlib.Path,
              tmp_path: pathlib.Path, owned: list[tuple[str, str, str]]) -> None:
    await _install_crds(k)
    pool = f"gate-{uuid.uuid4().hex[:6]}"
    await e2e.create_node_pool(pool, 2, builders.gpu_devices(4, per_pcie_root=2))
    # The only shape the autoscaler offers: like every node, 2 GPUs per PCIe root.
    shape_name = f"{pool}-shape"
    await k.apply({"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape",
                   "metadata": {"name": shape_name},
                   "spec": {"nodeLabels": {dra_driver.SHAPE_LABEL: harness.GPU_NODE_GROUP.shape},
                            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                            "resourceSlices": [{"driver": dra_driver.DEFAULT_DRIVER,
                                                "devices": builders.gpu_devices(4, 2)}],
                            "price": 10, "maxNodes": 8}})
    owned.append(("fitgate.io/v1alpha1", "NodeShape", shape_name))
    check = f"fitgate-{ns}"
    await k.apply(builders.admission_check(check, gating.CONTROLLER_NAME))
    owned.append((builders.KUEUE, "AdmissionCheck", check))
    await k.create(builders.claim_template("three-on-one-root", ns, 3,
                                           match_attribute=builders.PCIE_ROOT))
    await k.create(builders.claim_template("two-on-one-root", ns, 2,
                                           match_attribute=builders.PCIE_ROOT))
    _, _, pem = ab.tls_pair(tmp_path)
    port = processes.free_port()
    await start_fitgate(e2e, tmp_path, port)
    queue = await e2e.create_queues(f"cq-{ns}", admission_checks=[check])
    hooks = f"fitgate-e2e-{ns}"
    for obj in _webhooks(hooks, ns, port, pem):
        await k.apply(obj)
        owned.append((ADMISSION, obj["kind"], hooks))

    # The API server picks webhook configurations up asynchronously: probe with a
    # dry run until our gate appears.
    async def webhook_live() -> bool:
        probe = builders.job("probe", ns, queue)
        got = await k.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", probe,
                              query={"dryRun": "All"})
        return gating.gated_by_us(got)
    await kube.wait_for(webhook_live, 30, "the mutating webhook in effect")

    # 1. Can never fit: submitted as a person would (kubectl create), warned at once, created
    # unchanged but for the gate, held, explained.
    sent = builders.job("too-big", ns, queue, claim_template_name="three-on-one-root")
    assert e2e.cluster is not None
    made = await asyncio.to_thread(e2e.cluster.kubectl, "create", "-f", "-",
                                   input_text=json.dumps(sent))
    assert "Warning: fitgate: Job " + ns + "/too-big can never be admitted" in made.stderr
    assert "pcieRoot" in made.stderr
    created = await k.get("batch/v1", "Job", "too-big", ns)
    assert created is not None
    assert gating.annotations_of(created)[gating.GATED_BY] == gating.GATE
    assert created["spec"]["parallelism"] == sent["spec"]["parallelism"]
    assert created["spec"]["template"]["spec"]["resourceClaims"] == \
        sent["spec"]["template"]["spec"]["resourceClaims"]
    assert created["metadata"]["labels"] == sent["metadata"]["labels"]

    async def held() -> dict[str, Any] | None:
        job = await k.get("batch/v1", "Job", "too-big", ns)
        return job if gating.EXPLANATION in gating.annotations_of(job or {}) else None
    await e2e.wait_for(held, 60, "the gate to hold too-big with an explanation")
    wl = await e2e.workload_of_job("too-big")
    assert wl is not None and gating.gated_by_us(wl)

    # 2. Fits: ungated, quota reserved, then decided by fitgate's check (the same serve
    # process runs it: the gang fits the existing node, so the check turns Ready).
    await k.create(builders.job("fits", ns, queue, claim_template_name="two-on-one-root",
                                node_selector={dra_driver.SHAPE_LABEL: pool}))

    async def reserved() -> dict[str, Any] | None:
        job = await k.get("batch/v1", "Job", "fits", ns)
        if job is None or gating.gated_by_us(job):
            return None
        wl = await e2e.workload_of_job("fits")
        return wl if kube.has_condition(wl, "QuotaReserved") else None
    await e2e.wait_for(reserved, 90, "fits ungated and given quota")

    async def checked() -> dict[str, Any] | None:
        wl = await e2e.workload_of_job("fits")
        entries = {e["name"]: e for e in ((wl or {}).get("status") or {}).get(
            "admissionChecks", [])}
        return entries[check] if entries.get(check, {}).get("state") == "Ready" else None
    ready = await e2e.wait_for(checked, 60, "fitgate's check Ready for fits")
    assert ready["message"].startswith("fits on existing nodes"), ready

    # too-big never got quota, all this while.
    wl = await e2e.workload_of_job("too-big")
    assert wl is not None and not kube.has_condition(wl, "QuotaReserved")
    assert (kube.condition(wl, "QuotaReserved") or {}).get("reason") == "AdmissionGated"

    # fitgate explain (as `kubectl fitgate explain job/too-big -n NS` runs it) says why.
    plugin = pathlib.Path(sys.executable).parent / "kubectl-fitgate"
    for output in ("json", "text"):
        proc = await asyncio.create_subprocess_exec(
            str(plugin), "explain", "job/too-big", "-n", ns, "--kubeconfig", str(kubeconfig),
            "-o", output, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        if output == "json":
            report = json.loads(out)
            assert report["stage"] == "gated" and report["category"] == "configuration"
            [main] = report["fit"]["podSets"]
            assert any("pcieRoot" in r for r in main["reasons"]), main
        else:
            text = out.decode()
            assert "stage: gated" in text and "held back by: configuration" in text
            print(text)

    # 3. Under a FitPolicy with enforcement deny, the same Job is refused at submission.
    policy = f"deny-{ns}"
    await k.apply({"apiVersion": "fitgate.io/v1alpha1", "kind": "FitPolicy",
                   "metadata": {"name": policy},
                   "spec": {"subjects": {"namespaces": [ns]}, "enforcement": "deny"}})
    owned.append(("fitgate.io/v1alpha1", "FitPolicy", policy))

    async def denied() -> str | None:
        probe = builders.job("too-big-again", ns, queue, claim_template_name="three-on-one-root")
        local = e2e.cluster
        assert local is not None
        tried = await asyncio.to_thread(lambda: local.kubectl(
            "create", "--dry-run=server", "-f", "-", input_text=json.dumps(probe),
            check=False))
        return tried.stderr if tried.returncode != 0 else None
    refusal = await e2e.wait_for(denied, 30, "the deny policy in effect")

    async def valid() -> bool:
        got = await k.get("fitgate.io/v1alpha1", "FitPolicy", policy)
        return kube.has_condition(got, "Valid")
    await e2e.wait_for(valid, 30, "fitgate to mark the FitPolicy Valid")
    assert "denied the request: fitgate: Job " + ns + "/too-big-again can never be" in refusal
    for name in ("too-big", "fits"):
        await k.delete("batch/v1", "Job", name, ns)
