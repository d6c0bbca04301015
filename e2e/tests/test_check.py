"""fitgate's own admission check, end to end: `fitgate serve` against the local control plane
with real Kueue, kube-scheduler, cluster-autoscaler (kwok provider) and the fake DRA driver.

- A gang that fits existing nodes is admitted without a ProvisioningRequest, and its pods
  run where fitcore placed them.
- A gang that needs nodes gets exactly one ProvisioningRequest for the planned count of the
  node group's shape; cluster-autoscaler adds kwok nodes, the fake driver publishes their
  slices, fitgate verifies the gang on them, and the pods run on exactly those nodes with
  their claims allocated.
- The controller is killed between creating the request and marking the check Ready; the
  restarted controller admits the Workload with the same, single request.
- The controller killed at each further step, then started again: after planning (before
  the request exists) and after the request is Provisioned (before the nodes are looked
  at), both at the exact point by the `FITGATE_TEST_EXIT_AT` test hook
  (`admission/runtime/failpoint.py`), and during verification (the new nodes up, their slices
  late by the shape's delay, the check saying it waits for them). Each converges: admitted
  once on the verified new nodes, one request for the attempt, and none of fitgate's
  requests or PodTemplates left once the Job has finished.
- The order-sensitive gang (a launcher with a GPU and the NIC of one PCIe root, a worker
  with 4 GPUs of one root, one node): released by the release controller in fitcore's
  order it runs; a control pair without the gate, worker first, leaves the launcher
  unschedulable.
- New nodes that break their shape's promise (each GPU on its own PCIe root): Retry with
  a coordination message, an Event, the mismatch on the NodeShape's status, the request
  deleted.

`fitgate serve` runs as a local process of the test with a ServiceAccount token whose
ClusterRole is exactly admission/kube/rbac.py's PERMISSIONS. The Pod webhook lives on its
own branch, so Job pods here are not gated (see docs/ordering.md); the release-order test
creates its pods with the gate the webhook would add. The NodeShape CRD is installed here
in a minimal form until the chart's CRD is available.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import sys
from typing import Any

import pytest

from e2e import builders, harness, kube, runner
from e2e.cluster.local import cluster, processes

pytestmark = [pytest.mark.e2e]

CONTROLLER = "fitgate.io/topology-fit"
FITGATE = "fitgate.io/v1alpha1"
GROUP = harness.GPU_NODE_GROUP
GROUP_DEVICES: list[dict[str, Any]] = list(GROUP.devices or ())
ROOT = pathlib.Path(__file__).resolve().parents[2]

NODESHAPE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "nodeshapes.fitgate.io"},
    "spec": {"group": "fitgate.io", "scope": "Cluster",
             "names": {"plural": "nodeshapes", "singular": "nodeshape", "kind": "NodeShape",
                       "listKind": "NodeShapeList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def node_shape() -> dict[str, Any]:
    """The NodeShape of the autoscaler's kwok node group: what its nodes publish."""
    return {"apiVersion": FITGATE, "kind": "NodeShape", "metadata": {"name": GROUP.name},
            "spec": {"nodeLabels": {cluster.NODEGROUP_LABEL: GROUP.name,
                                    cluster.SHAPE_LABEL: GROUP.shape},
                     "allocatable": dict(GROUP.allocatable),
                     "resourceSlices": [{"driver": "gpu.e2e.fitgate.io",
                                         "devices": GROUP_DEVICES}],
                     "price": 10}}


SERVICE_ACCOUNT = "fitgate-ctl-logic"


async def install_rbac(e2e: harness.Harness) -> None:
    """A ClusterRole granting exactly admission/kube/rbac.py's PERMISSIONS, bound to the
    ServiceAccount serve runs as (never admin)."""
    from admission.kube import rbac

    role = rbac.cluster_role(SERVICE_ACCOUNT)
    await e2e.kube.apply(role)
    await e2e.kube.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": SERVICE_ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": SERVICE_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                      "namespace": cluster.SYSTEM_NAMESPACE}]})


@pytest.fixture
async def fitgate(e2e: harness.Harness, local_cluster: cluster.LocalCluster,
                  request: pytest.FixtureRequest) -> runner.LocalProcess:
    """`fitgate serve` as a process of this test, with the ServiceAccount's token.
    Parametrized indirectly with a step of `admission/runtime/failpoint.py`, it exits there
    (FITGATE_TEST_EXIT_AT) until the test removes the variable and starts it again."""
    from admission.runtime import failpoint

    step = getattr(request, "param", None)
    env = {"PYTHONUNBUFFERED": "1"}
    if step in failpoint.STEPS:
        env[failpoint.ENV] = str(step)
    if await e2e.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                          NODESHAPE_CRD["metadata"]["name"]) is None:
        await e2e.kube.create(NODESHAPE_CRD)

        async def established() -> bool:
            crd = await e2e.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                     NODESHAPE_CRD["metadata"]["name"])
            return kube.has_condition(crd, "Established")
        await kube.wait_for(established, 30, "NodeShape CRD established")
    await e2e.kube.apply(node_shape())
    await install_rbac(e2e)
    creds = local_cluster.token_for(SERVICE_ACCOUNT, cluster.SYSTEM_NAMESPACE, create=True)
    port = processes.free_port()
    return await e2e.start_process(
        "fitgate-serve",
        [sys.executable, "-m", "admission.app.cli", "serve",
         "--kubeconfig", str(creds.kubeconfig), "--leader-election", "false",
         "--health-address", "127.0.0.1", "--health-port", str(port),
         "--namespace", cluster.SYSTEM_NAMESPACE, "--provisioning-wait", "120"],
        env=env, ready_url=f"http://127.0.0.1:{port}/readyz",
        cwd=ROOT, timeout=90)


def crash(proc: runner.LocalProcess) -> None:
    """SIGKILL the process group: no graceful shutdown, as a crash."""
    assert proc.pid is not None
    os.killpg(os.getpgid(proc.pid), signal.SIGKILL)


async def fitgate_queue(e2e: harness.Harness) -> tuple[str, str]:
    """Our AdmissionCheck (Active, set by fitgate) and a queue that uses it."""
    check = f"fitgate-{e2e.namespace}"
    await e2e.kube.apply(builders.admission_check(check, CONTROLLER))
    e2e._cluster_objects.append((builders.KUEUE, "AdmissionCheck", check))

    async def active() -> bool:
        ac = await e2e.kube.get(builders.KUEUE, "AdmissionCheck", check)
        return kube.has_condition(ac, "Active")
    await e2e.wait_for(active, 60, f"fitgate marks AdmissionCheck {check} Active")
    queue = await e2e.create_queues(f"cq-{e2e.namespace}", admission_checks=[check])
    return check, queue


async def admitted_workload(e2e: harness.Harness, job: str, timeout: float
                            ) -> dict[str, Any]:
    async def admitted() -> dict[str, Any] | None:
        wl = await e2e.workload_of_job(job)
        return wl if kube.has_condition(wl, "Admitted") else None
    wl: dict[str, Any] = await e2e.wait_for(admitted, timeout,
                                            f"the Workload of Job {job} admitted")
    return wl


async def running_pods(e2e: harness.Harness, job: str, count: int, timeout: float = 90
                       ) -> list[dict[str, Any]]:
    return await e2e.running_pods(job, count, timeout)


async def claims_allocated(e2e: harness.Harness, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        names = [s["resourceClaimName"] for s in p["status"].get("resourceClaimStatuses", [])]
        assert names, f"pod {p['metadata']['name']} has no ResourceClaim"
        for n in names:
            claim = await e2e.kube.get("resource.k8s.io/v1", "ResourceClaim", n, e2e.namespace)
            assert claim is not None and claim["status"].get("allocation"), n


def entry(wl: dict[str, Any], check: str) -> dict[str, Any]:
    (e,) = [e for e in wl["status"]["admissionChecks"] if e["name"] == check]
    return dict(e)


async def requests(e2e: harness.Harness) -> list[dict[str, Any]]:
    return await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest", e2e.namespace)


async def group_nodes(e2e: harness.Harness) -> list[str]:
    nodes = await e2e.kube.list("v1", "Node",
                                label_selector=f"{cluster.NODEGROUP_LABEL}={GROUP.name}")
    return [n["metadata"]["name"] for n in nodes]


# --------------------------------------------------------------------------- tests


@pytest.mark.timeout(300)
async def test_gang_that_fits_existing_nodes_is_admitted_without_a_request(
        e2e: harness.Harness, fitgate: runner.LocalProcess) -> None:
    (node,) = await e2e.create_node_pool("fit-gpu", 1, builders.gpu_devices(4, per_pcie_root=2))
    check, queue = await fitgate_queue(e2e)
    await e2e.kube.create(builders.claim_template(
        "two-gpus-one-root", e2e.namespace, 2, match_attribute=builders.PCIE_ROOT))
    await e2e.create_job("fits", queue, parallelism=2, claim_template_name="two-gpus-one-root",
                         node_selector={cluster.SHAPE_LABEL: "fit-gpu"})
    wl = await admitted_workload(e2e, "fits", 90)
    e = entry(wl, check)
    assert e["state"] == "Ready"
    assert e["message"].startswith(f"fits on existing nodes: 2 pods on 1 nodes ({node})")
    (update,) = e["podSetUpdates"]
    assert update["nodeSelector"] == {"kubernetes.io/hostname": node}
    assert update["labels"]["fitgate.io/placement"] == wl["metadata"]["uid"]
    assert await requests(e2e) == []
    pods = await running_pods(e2e, "fits", 2)
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    cm = await e2e.kube.get("v1", "ConfigMap", f"fitgate-placement-{wl['metadata']['uid']}",
                            e2e.namespace)
    assert cm is not None and node in cm["data"]["placements.json"]
    await claims_allocated(e2e, pods)
    await e2e.finish_pods(pods)


async def _needs_nodes(e2e: harness.Harness, fitgate: runner.LocalProcess, job: str, *,
                       kill: bool) -> None:
    check, queue = await fitgate_queue(e2e)
    await e2e.kube.create(builders.claim_template(
        "two-gpus-one-root", e2e.namespace, 2, match_attribute=builders.PCIE_ROOT))
    existing = await group_nodes(e2e)
    # Two pods per node of the group (2 GPUs on each of its 2 PCIe roots): the existing
    # nodes of the group are used, and two new ones are needed.
    pods_wanted = 2 * (len(existing) + 2)
    await e2e.create_job(job, queue, parallelism=pods_wanted,
                         claim_template_name="two-gpus-one-root",
                         node_selector={cluster.NODEGROUP_LABEL: GROUP.name})

    async def one_request() -> dict[str, Any] | None:
        prs = await requests(e2e)
        return prs[0] if prs else None
    pr = await e2e.wait_for(one_request, 90, "fitgate creates a ProvisioningRequest")
    assert "ownerReferences" not in pr["metadata"]
    assert [ps["count"] for ps in pr["spec"]["podSets"]] == [2]
    uid = pr["metadata"]["uid"]
    if kill:
        crash(fitgate)

        async def dead() -> bool:
            return not fitgate.alive()
        await e2e.wait_for(dead, 20, "fitgate serve killed")
        before = await e2e.workload_of_job(job)
        assert before is not None and entry(before, check)["state"] == "Pending", \
            "the kill must land between the request and Ready"
        await fitgate.start(90)
    wl = await admitted_workload(e2e, job, 240)
    e = entry(wl, check)
    assert e["state"] == "Ready", e["message"]
    assert e["message"].startswith(f"verified on the nodes of ProvisioningRequest "
                                   f"{pr['metadata']['name']}")
    (update,) = e["podSetUpdates"]
    assert update["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == \
        pr["metadata"]["name"]
    prs = await requests(e2e)
    assert [p["metadata"]["uid"] for p in prs] == [uid], "one request, never re-created"
    new = sorted(set(await group_nodes(e2e)) - set(existing))
    assert len(new) == 2
    pods = await running_pods(e2e, job, pods_wanted, timeout=120)
    assert {p["spec"]["nodeName"] for p in pods} == set(existing) | set(new)
    await claims_allocated(e2e, pods)
    await e2e.finish_pods(pods)


@pytest.mark.timeout(420)
async def test_gang_that_needs_nodes_gets_one_request_and_runs_on_the_new_nodes(
        e2e: harness.Harness, fitgate: runner.LocalProcess) -> None:
    await _needs_nodes(e2e, fitgate, "grow", kill=False)


@pytest.mark.timeout(420)
async def test_controller_killed_after_the_request_admits_without_a_duplicate(
        e2e: harness.Harness, fitgate: runner.LocalProcess) -> None:
    # The new nodes publish their slices late, so the SIGKILL always lands between the
    # request and Ready: with prompt slices the autoscaler and fitgate can reach Ready
    # before the test has seen the request (it did once on a quiet machine).
    await e2e.define_shape(GROUP.shape, builders.shape(GROUP_DEVICES,
                                                       delay_seconds=SLICE_DELAY_S))
    try:
        await _needs_nodes(e2e, fitgate, "crash", kill=True)
    finally:
        await e2e.define_shape(GROUP.shape, builders.shape(GROUP_DEVICES))
    assert fitgate.starts == 2


# ------------------------------------------------- killed at each step

SLICE_DELAY_S = 20  # "verifying": the new nodes publish their slices this late


async def fitgate_templates(e2e: harness.Harness) -> list[str]:
    templates = await e2e.kube.list("v1", "PodTemplate", e2e.namespace,
                                    label_selector="app.kubernetes.io/managed-by=fitgate")
    return sorted(t["metadata"]["name"] for t in templates)


async def _killed_at(e2e: harness.Harness, fitgate: runner.LocalProcess, step: str) -> None:
    """Kill fitgate at `step`, start it again, and check it converges: the gang admitted
    once on verified new nodes, exactly one request for the attempt, and nothing of
    fitgate's left once the Job has finished."""
    from admission.runtime import failpoint

    check, queue = await fitgate_queue(e2e)
    await e2e.kube.create(builders.claim_template(
        "two-gpus-one-root", e2e.namespace, 2, match_attribute=builders.PCIE_ROOT))
    existing = await group_nodes(e2e)
    pods_wanted = 2 * (len(existing) + 2)  # as in _needs_nodes: two new nodes
    job = f"kill-{step}"
    await e2e.create_job(job, queue, parallelism=pods_wanted,
                         claim_template_name="two-gpus-one-root",
                         node_selector={cluster.NODEGROUP_LABEL: GROUP.name})
    before: list[dict[str, Any]] = []
    if step in failpoint.STEPS:
        async def exited() -> bool:
            return not fitgate.alive()
        await e2e.wait_for(exited, 180, f"fitgate exits at its failpoint {step!r}")
        assert fitgate.returncode == failpoint.EXIT_CODE, fitgate.log_tail(20)
        before = await requests(e2e)
        if step == "planned":
            assert before == [] and await fitgate_templates(e2e) == [], \
                "the kill must land after the plan, before anything of it is written"
        else:
            (pr,) = before
            assert kube.has_condition(pr, "Provisioned")
        fitgate.env.pop(failpoint.ENV)
    else:
        # Nodes up, slices late: fitgate is between Provisioned and its verification.
        async def waiting_for_slices() -> bool:
            wl = await e2e.workload_of_job(job)
            return any(x.get("name") == check and "is provisioned; waiting for the new nodes"
                       in str(x.get("message"))
                       for x in ((wl or {}).get("status") or {}).get("admissionChecks") or [])
        await e2e.wait_for(waiting_for_slices, 180, "fitgate waiting for the new nodes' slices")
        crash(fitgate)

        async def dead() -> bool:
            return not fitgate.alive()
        await e2e.wait_for(dead, 20, "fitgate serve killed")
        before = await requests(e2e)
        new = sorted(set(await group_nodes(e2e)) - set(existing))
        late = [n for n in new if not await e2e.slices_of(n)]
        assert late, "the kill must land while some new node has no slices yet"
    wl = await e2e.workload_of_job(job)
    assert wl is not None and not kube.has_condition(wl, "Admitted")
    await fitgate.start(90)

    wl = await admitted_workload(e2e, job, 240)
    e = entry(wl, check)
    prs = await requests(e2e)
    assert len(prs) == 1, [p["metadata"]["name"] for p in prs]
    (pr,) = prs
    assert pr["metadata"]["labels"]["fitgate.io/attempt"] == "1"
    if before:
        assert pr["metadata"]["uid"] == before[0]["metadata"]["uid"], "asked again"
    assert e["state"] == "Ready" and not e.get("retryCount"), e
    assert e["message"].startswith(
        f"verified on the nodes of ProvisioningRequest {pr['metadata']['name']}"), e["message"]
    assert not kube.has_condition(wl, "Evicted"), "admitted more than once"
    assert await fitgate_templates(e2e) == [f"ppt-{pr['metadata']['name']}-{GROUP.name}"]
    pods = await running_pods(e2e, job, pods_wanted, timeout=120)
    new = sorted(set(await group_nodes(e2e)) - set(existing))
    assert len(new) == 2
    assert {p["spec"]["nodeName"] for p in pods} == set(existing) | set(new)
    await e2e.finish_pods(pods)

    async def nothing_left() -> bool:
        return await requests(e2e) == [] and await fitgate_templates(e2e) == []
    await e2e.wait_for(nothing_left, 90, "fitgate's request and templates deleted once the "
                       "Job finished")
    assert fitgate.starts == 2


@pytest.mark.timeout(420)
@pytest.mark.parametrize("fitgate", ["planned", "provisioned", "verifying"], indirect=True,
                         ids=["after-planning", "after-provisioned", "during-verification"])
async def test_controller_killed_at_each_step_converges_after_restart(
        e2e: harness.Harness, fitgate: runner.LocalProcess, request: pytest.FixtureRequest
        ) -> None:
    step = request.node.callspec.params["fitgate"]
    if step == "verifying":
        await e2e.define_shape(GROUP.shape, builders.shape(GROUP_DEVICES,
                                                           delay_seconds=SLICE_DELAY_S))
    try:
        await _killed_at(e2e, fitgate, step)
    finally:
        if step == "verifying":
            await e2e.define_shape(GROUP.shape, builders.shape(GROUP_DEVICES))


# ------------------------------------------------------------- release order

DRIVER = "gpu.e2e.fitgate.io"


def _typed(devices: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    for d in devices:
        d["attributes"]["type"] = {"string": kind}
    return devices


def order_devices() -> list[dict[str, Any]]:
    """8 GPUs, 4 per PCIe root, and one NIC on pci0: a launcher (GPU + NIC on one root)
    and a worker (4 GPUs on one root) fit together only if the launcher binds first."""
    nic = {"name": "nic-0", "attributes": {builders.PCIE_ROOT: {"string": "pci0"}}}
    return [*_typed(builders.gpu_devices(8, per_pcie_root=4), "gpu"), *_typed([nic], "nic")]


def _select(kind: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f'device.attributes["{DRIVER}"].type == "{kind}"'}}]


def order_templates(namespace: str) -> list[dict[str, Any]]:
    def rct(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
        spec = {"devices": {"requests": requests, "constraints": [
            {"requests": [r["name"] for r in requests], "matchAttribute": builders.PCIE_ROOT}]}}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": spec}}

    def req(name: str, kind: str, count: int) -> dict[str, Any]:
        return {"name": name, "exactly": {"deviceClassName": DRIVER, "count": count,
                                          "selectors": _select(kind)}}
    return [rct("launcher", [req("gpu", "gpu", 1), req("nic", "nic", 1)]),
            rct("worker", [req("gpus", "gpu", 4)])]


def order_pod(name: str, pod_set: str, namespace: str, uid: str, pool: str, *,
              gated: bool) -> dict[str, Any]:
    spec = builders.pod_spec("1", "launcher" if pod_set == "launcher" else "worker",
                             {cluster.SHAPE_LABEL: pool})
    if gated:  # what fitgate's webhook adds at CREATE to pods labelled for release
        spec["schedulingGates"] = [{"name": "fitgate.io/placement"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"fitgate.io/placement": uid, "fitgate.io/pod-set": pod_set}},
            "spec": spec}


async def fitcore_placements(e2e: harness.Harness, node: str, templates: list[dict[str, Any]]
                             ) -> list[dict[str, Any]]:
    """fitcore's placement of the launcher+worker gang on the node, in its order."""
    from fitcore import gang, plan, workload

    docs: list[tuple[dict[str, Any], str | None]] = [
        (await e2e.kube.get("resource.k8s.io/v1", "DeviceClass", DRIVER) or {}, None),
        (await e2e.kube.get("v1", "Node", node) or {}, None),
        *(({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **s}, None)
          for s in await e2e.slices_of(node)),
        *((t, None) for t in templates)]
    pod_sets = [{"name": ps, "count": 1, "template": {"spec": builders.pod_spec(
        "1", t, {"kubernetes.io/hostname": node})}}
        for ps, t in (("launcher", "launcher"), ("workers", "worker"))]
    docs.append(({"apiVersion": builders.KUEUE, "kind": "Workload",
                  "metadata": {"name": "order", "namespace": e2e.namespace},
                  "spec": {"queueName": "q", "podSets": pod_sets}}, None))
    bundle = workload.load(docs)
    result = plan.plan(bundle.gangs[0], gang.Snapshot(bundle.nodes, bundle.inventory,
                                                      bundle.used), [])
    assert result.verdict == "fits", result.reasons
    return [{"podSet": p.pod_set, "index": p.index, "node": p.node} for p in result.placements]


@pytest.mark.timeout(300)
async def test_order_sensitive_gang_runs_when_released_in_fitcores_order(
        e2e: harness.Harness, fitgate: runner.LocalProcess) -> None:
    (node,) = await e2e.create_node_pool("order-gpu", 1, order_devices())
    await e2e.create_node_pool("order-ctl", 1, order_devices())
    templates = order_templates(e2e.namespace)
    for t in templates:
        await e2e.kube.create(t)
    placements = await fitcore_placements(e2e, node, templates)
    assert [p["podSet"] for p in placements] == ["launcher", "workers"]

    # Control: without the gate, the worker created first binds first, takes pci0's GPUs,
    # and the launcher (GPU + the only NIC, on one root) can never be placed on the node.
    await e2e.kube.create(order_pod("ctl-worker", "workers", e2e.namespace, "none",
                                    "order-ctl", gated=False))

    async def bound(name: str) -> dict[str, Any] | None:
        p = await e2e.kube.get("v1", "Pod", name, e2e.namespace)
        return p if p and p["spec"].get("nodeName") else None
    await e2e.wait_for(lambda: bound("ctl-worker"), 60, "the control worker bound")
    await e2e.kube.create(order_pod("ctl-launcher", "launcher", e2e.namespace, "none",
                                    "order-ctl", gated=False))
    await asyncio.sleep(15)
    stuck = await e2e.kube.get("v1", "Pod", "ctl-launcher", e2e.namespace)
    assert stuck is not None and not stuck["spec"].get("nodeName"), \
        "the control launcher was expected to stay unschedulable"

    # fitgate: the same pods, worker created first, gated; the release controller pins
    # each to its node and releases the launcher first, the worker once it is bound.
    uid = f"order-{e2e.namespace}"
    await e2e.kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": f"fitgate-placement-{uid}",
                                        "namespace": e2e.namespace},
                           "data": {"placements.json": json.dumps(placements)}})
    await e2e.kube.create(order_pod("worker", "workers", e2e.namespace, uid, "order-gpu",
                                    gated=True))
    await asyncio.sleep(2)
    await e2e.kube.create(order_pod("launcher", "launcher", e2e.namespace, uid, "order-gpu",
                                    gated=True))

    async def both_running() -> list[dict[str, Any]] | None:
        pods = [await e2e.kube.get("v1", "Pod", n, e2e.namespace) for n in ("launcher",
                                                                             "worker")]
        ok = all(p and p["status"].get("phase") == "Running" for p in pods)
        return [p for p in pods if p] if ok else None
    pods = await e2e.wait_for(both_running, 90, "launcher and worker Running")
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    assert all(p["metadata"]["annotations"]["fitgate.io/slot"] for p in pods)
    started = {p["metadata"]["name"]: kube.condition(p, "PodScheduled") for p in pods}
    assert started["launcher"] and started["worker"]
    assert started["launcher"]["lastTransitionTime"] <= started["worker"]["lastTransitionTime"]
    await claims_allocated(e2e, pods)


# ------------------------------------------------------------------- misfit


@pytest.mark.timeout(300)
async def test_nodes_that_break_their_shapes_promise_are_a_coordination_retry(
        e2e: harness.Harness, fitgate: runner.LocalProcess) -> None:
    # The node group's new nodes publish each GPU on its own PCIe root: the NodeShape
    # promised two GPUs per root, and a pod wants two GPUs on one root.
    faulty = builders.gpu_devices(4, per_pcie_root=1)
    await e2e.define_shape(GROUP.shape, builders.shape(GROUP_DEVICES, faulty_devices=faulty,
                                                       faulty_nodes="all"))
    try:
        check, queue = await fitgate_queue(e2e)
        await e2e.kube.create(builders.claim_template(
            "two-gpus-one-root", e2e.namespace, 2, match_attribute=builders.PCIE_ROOT))
        await e2e.create_job("misfit", queue, parallelism=2,
                             claim_template_name="two-gpus-one-root",
                             node_selector={cluster.NODEGROUP_LABEL: GROUP.name})

        async def misfit_event() -> dict[str, Any] | None:
            events = await e2e.kube.list("events.k8s.io/v1", "Event", e2e.namespace)
            hits = [ev for ev in events if ev.get("reason") == "ProvisionedNodesMisfit"]
            return hits[0] if hits else None
        event = await e2e.wait_for(misfit_event, 180, "fitgate reports the misfit")
        assert event["note"].startswith("coordination: the new nodes of ProvisioningRequest")
        assert "attribute resource.kubernetes.io/pcieRoot is 'pci1', shape promised 'pci0'" \
            in event["note"]
        # The Event and the NodeShape's status are written one after the other: wait for
        # the status rather than read it the moment the Event is seen.

        async def recorded() -> dict[str, Any] | None:
            shape = await e2e.kube.get(FITGATE, "NodeShape", GROUP.name)
            verification = ((shape or {}).get("status") or {}).get("verification") or {}
            return verification.get("lastMismatch")
        last = await e2e.wait_for(recorded, 30, "the NodeShape's status records the mismatch")
        assert last["workload"].startswith(f"{e2e.namespace}/")
        assert last["details"]

        async def released() -> bool:
            return await requests(e2e) == []
        await e2e.wait_for(released, 30, "the request deleted so the nodes can scale down")
        wl = await e2e.workload_of_job("misfit")
        assert wl is not None and not kube.has_condition(wl, "Admitted")
        assert entry(wl, check)["state"] != "Ready"
    finally:
        await e2e.define_shape(GROUP.shape, builders.shape(GROUP_DEVICES))
