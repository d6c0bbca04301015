"""`kubectl fitgate explain` with the credentials of a user who may read only their own
namespace (issue #21 item 6), on the local control plane with real Kueue and RBAC.

`fitgate serve` runs as in `test_gate.py` (its own ServiceAccount, `rbac.PERMISSIONS`).
A Job that can never fit (3 GPUs on one PCIe root; every node and the only NodeShape have
2) is submitted carrying fitgate's admission gate, as the webhook would add it; the gate
holds it and writes its explanation. Then:

1. A ServiceAccount whose Role allows get/list on Jobs, Workloads, Events and Pods in its
   namespace only, and a kubeconfig with its token (whose context names that namespace,
   so there is no -n): `fitgate explain job/too-big` exits 0, states which reads the API
   server refused (403: nodes, resourceslices, ...), says from the Job's and the
   Workload's annotations and conditions that the gate holds it and why (pcieRoot), that
   quota is not reserved, and prints no plan and no fit.
2. The admin's kubeconfig: the same command plans now (`fit now:`, the pcieRoot reason
   per pod set), as it did before.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import uuid
from typing import Any

import pytest

from admission.gate import predicates as gating
from e2e import builders, dra_driver, harness, kube
from e2e.cluster.local import processes
from e2e.tests import test_gate
from tests.admission import builders as ab

pytestmark = [pytest.mark.e2e]

RBAC = "rbac.authorization.k8s.io/v1"
#: What a data scientist's namespace Role grants, and nothing else.
READER_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
]


async def explain(kubeconfig: pathlib.Path, *args: str) -> tuple[int, str, str]:
    plugin = pathlib.Path(sys.executable).parent / "kubectl-fitgate"
    proc = await asyncio.create_subprocess_exec(
        str(plugin), "explain", "job/too-big", "--kubeconfig", str(kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.timeout(300)
async def test_a_namespace_reader_is_told_what_fitgate_could_not_see_and_gets_no_plan(
        e2e: harness.Harness, kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> None:
    if e2e.cluster is None:
        pytest.skip("needs the local cluster (token_for, local processes)")
    ns = e2e.namespace
    k = e2e.kube
    owned: list[tuple[str, str, str]] = [
        (RBAC, "ClusterRole", f"fitgate-e2e-{ns}"),
        (RBAC, "ClusterRoleBinding", f"fitgate-e2e-{ns}")]
    try:
        await hold_too_big(e2e, k, ns, tmp_path, owned)
        reader = await namespace_reader(e2e, k, ns)
        await as_the_reader(reader, ns)
        await as_the_admin(kubeconfig, ns)
    finally:
        await test_gate.delete_quietly(k, owned)


async def hold_too_big(e2e: harness.Harness, k: kube.Kube, ns: str, tmp_path: pathlib.Path,
                       owned: list[tuple[str, str, str]]) -> None:
    """fitgate serve, its AdmissionCheck, a queue, and the Job it holds with a reason."""
    await test_gate._install_crds(k)
    pool = f"rbac-{uuid.uuid4().hex[:6]}"
    await e2e.create_node_pool(pool, 1, builders.gpu_devices(4, per_pcie_root=2))
    shape = f"{pool}-shape"
    await k.apply({"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape",
                   "metadata": {"name": shape},
                   "spec": {"nodeLabels": {dra_driver.SHAPE_LABEL: harness.GPU_NODE_GROUP.shape},
                            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                            "resourceSlices": [{"driver": dra_driver.DEFAULT_DRIVER,
                                                "devices": builders.gpu_devices(4, 2)}],
                            "price": 10, "maxNodes": 8}})
    owned.append(("fitgate.io/v1alpha1", "NodeShape", shape))
    check = f"fitgate-{ns}"
    await k.apply(builders.admission_check(check, gating.CONTROLLER_NAME))
    owned.append((builders.KUEUE, "AdmissionCheck", check))
    await k.create(builders.claim_template("three-on-one-root", ns, 3,
                                           match_attribute=builders.PCIE_ROOT))
    ab.tls_pair(tmp_path)
    await test_gate.start_fitgate(e2e, tmp_path, processes.free_port())
    queue = await e2e.create_queues(f"cq-{ns}", admission_checks=[check])
    # Submitted with the gate the mutating webhook adds (test_gate.py covers the webhook).
    job = builders.job("too-big", ns, queue, claim_template_name="three-on-one-root")
    job["metadata"]["annotations"] = {gating.GATED_BY: gating.GATE}
    await k.create(job)

    async def held() -> dict[str, Any] | None:
        got = await k.get("batch/v1", "Job", "too-big", ns)
        return got if gating.EXPLANATION in gating.annotations_of(got or {}) else None
    await e2e.wait_for(held, 90, "the gate to hold too-big with an explanation")


async def namespace_reader(e2e: harness.Harness, k: kube.Kube, ns: str) -> pathlib.Path:
    """A kubeconfig (context namespace `ns`) with the token of a ServiceAccount that may
    read Jobs, Workloads, Events and Pods in `ns` and nothing else."""
    assert e2e.cluster is not None
    await k.apply({"apiVersion": RBAC, "kind": "Role",
                   "metadata": {"name": "reader", "namespace": ns}, "rules": READER_RULES})
    await k.apply({"apiVersion": RBAC, "kind": "RoleBinding",
                   "metadata": {"name": "reader", "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                               "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "reader",
                                 "namespace": ns}]})
    creds = await asyncio.to_thread(e2e.cluster.token_for, "reader", ns, "10m", True)
    return creds.kubeconfig


async def as_the_reader(reader: pathlib.Path, ns: str) -> None:
    code, out, err = await explain(reader, "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["namespace"] == ns  # from the kubeconfig's context, no -n
    assert report["stage"] == "gated" and report["category"] == "configuration"
    assert report["fit"] is None and report["plan"] is None
    refused = {u["resource"]: u["status"] for u in report["unseen"]}
    for resource in ("nodes", "resourceslices", "deviceclasses", "nodeshapes",
                     "admissionchecks", "clusterqueues"):
        assert refused.get(resource) == 403, refused
    assert "nodes" in report["noFit"]
    assert report["gate"]["explanation"]["category"] == "configuration"
    assert report["quota"]["reserved"] is False
    assert report["quota"]["reason"] == "AdmissionGated"

    code, text, err = await explain(reader)
    assert code == 0, err
    print(text)
    lines = text.splitlines()
    assert lines[1].startswith("stage: gated: ")
    assert "held back by: configuration" in lines
    assert any(line.startswith("could not see (the API server refused these reads, "
                               "status 403") for line in lines), text
    assert "  - list nodes cluster-wide" in lines
    assert "  - list resourceslices.resource.k8s.io cluster-wide" in lines
    assert any(line.startswith("no plan now: planning needs nodes") for line in lines)
    assert any(line.startswith("quota: not reserved (AdmissionGated") for line in lines)
    assert "  the gate's verdict: unsatisfiable" in lines
    assert any("pcieRoot" in line for line in lines), text
    assert not any(line.startswith(("plan", "fit now", "pod set")) for line in lines), text


async def as_the_admin(admin: pathlib.Path, ns: str) -> None:
    code, text, err = await explain(admin, "-n", ns)
    assert code == 0, err
    lines = text.splitlines()
    assert not any(line.startswith("could not see") for line in lines), text
    assert "fit now: unsatisfiable (configuration)" in text
    assert "pod set main (1 pod):" in lines, text
