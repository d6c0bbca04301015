"""Scenario 1's topology mismatch with Karpenter: Karpenter alone, then fitgate.

Two NodePools Karpenter may grow, one instance type each (e2e/karpenter/conftest.py):

- ``s1k-cheap``: instance type ``gpu-split-8x``, 32 CPUs, price 10; its nodes publish 8
  GPUs split over two PCIe roots (4 + 4);
- ``s1k-dear``: instance type ``gpu-one-root-8x``, 48 CPUs, price 14; 8 GPUs on one root.

The gang: a Job of 4 pods, each 30 CPUs and 8 GPUs on one PCIe root (the claim template
of scenario 1). Karpenter alone, as it ships (``IGNORE_DRA_REQUESTS=true``: its DRA
simulation off), skips every pod with a ResourceClaim ("skipping pod with Dynamic
Resource Allocation requirements, not yet supported by Karpenter", v1.15.0
``pkg/controllers/provisioning/scheduling/scheduler.go``): it buys nothing and the pods
stay Pending. fitgate (NodeShapes naming the NodePools) plans against the devices,
creates one NodeClaim per planned node on the dear pool, verifies the nodes'
ResourceSlices and admits: the gang runs.

With Karpenter's DRA simulation on (``IGNORE_DRA_REQUESTS=false``;
``LocalCluster.configure_karpenter(dra=True)`` restarts only its process), Karpenter
allocates the claim against the devices it expects on each candidate node: in-cluster
ResourceSlices for existing nodes, the instance type's ResourceSlice templates for new
ones. The kwok provider's instance types declare no templates (its instance-types file
has no field for them in v1.15.0), so no instance type satisfies the claim ("allocating
dynamic resources, no instance type can satisfy the allocation"): it buys nothing either,
and the pods stay Pending. Through fitgate it buys nothing extra: the gang's pods appear
only once fitgate's four nodes exist and are bound to them at once.

Measured per run: seconds from submit to all pods Running (or "not running after N s"),
the instance types and nodes bought, node-seconds bought but unused by the gang.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import yaml

from e2e import builders, dra_driver, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import figures, topology

SCENARIO = "1 topology mismatch (Karpenter)"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODE_POOL_LABEL = "karpenter.sh/nodepool"
KARPENTER_TIMEOUT_S = 60.0
FITGATE_TIMEOUT_S = 240.0


@dataclasses.dataclass(frozen=True)
class Pool:
    name: str
    instance_type: str
    gpus_per_root: int
    allocatable_cpu: str  # what the shape promises: the instance type's CPUs, less overhead
    price: str


POOLS = (Pool("s1k-cheap", "gpu-split-8x", 4, "31", "10"),
         Pool("s1k-dear", "gpu-one-root-8x", 8, "47", "14"))


def devices(pool: Pool) -> list[dict[str, Any]]:
    return builders.gpu_devices(topology.GPUS_PER_POD, per_pcie_root=pool.gpus_per_root)


def node_pool(pool: Pool) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": pool.name},
            "spec": {"template": {
                "metadata": {"labels": {cluster.SHAPE_LABEL: pool.name}},
                "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh",
                                          "kind": "KWOKNodeClass",
                                          "name": cluster.KWOK_NODE_CLASS},
                         "requirements": [{"key": INSTANCE_TYPE_LABEL, "operator": "In",
                                           "values": [pool.instance_type]}]}},
                # Nodes stay until the test deletes them: figures, not consolidation.
                "disruption": {"consolidationPolicy": "WhenEmpty",
                               "consolidateAfter": "Never"}}}


def node_shape(pool: Pool) -> dict[str, Any]:
    """The NodeShape that describes ``pool`` to fitgate, served by Karpenter."""
    return {
        "apiVersion": topology.SHAPE_API, "kind": "NodeShape",
        "metadata": {"name": pool.name},
        "spec": {
            "nodeLabels": {cluster.SHAPE_LABEL: pool.name},
            "allocatable": {"cpu": pool.allocatable_cpu, "memory": "250Gi", "pods": "110"},
            "resourceSlices": [{"driver": cluster.DRIVER_NAME,
                                "pool": {"name": "gpus", "resourceSliceCount": 1},
                                "devices": devices(pool)}],
            "price": pool.price,
            "provisioning": {"karpenter": {"nodePool": pool.name, "requirements": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In",
                 "values": [pool.instance_type]}]}},
            "maxNodes": topology.GANG_PODS,
        },
    }


def setup(local: cluster.LocalCluster) -> None:
    """The fake driver's shapes and the two NodePools (cluster objects of the module)."""
    local.apply([
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": dra_driver.SHAPES_CONFIGMAP,
                      "namespace": cluster.SYSTEM_NAMESPACE},
         "data": {p.name: yaml.safe_dump(builders.shape(devices(p)), sort_keys=False)
                  for p in POOLS}},
        *(node_pool(p) for p in POOLS)])


def node_claims(local: cluster.LocalCluster) -> list[dict[str, Any]]:
    out = json.loads(local.kubectl("get", "nodeclaims", "-o", "json").stdout)
    return list(out.get("items") or [])


def release_nodes(local: cluster.LocalCluster, timeout: float = 120) -> None:
    """Delete every NodeClaim (Karpenter deletes their nodes) and wait until no node of
    the pools is left."""
    local.kubectl("delete", "nodeclaims", "--all", "--wait=false")
    deadline = time.monotonic() + timeout
    while True:
        left = json.loads(local.kubectl("get", "nodes", "-l", NODE_POOL_LABEL, "-o",
                                        "json").stdout).get("items") or []
        if not left and not node_claims(local):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nodes of the NodePools still there after {timeout:.0f}s: "
                                 + ", ".join(n["metadata"]["name"] for n in left))
        time.sleep(1.0)


@dataclasses.dataclass
class Run:
    path: str
    seconds: float | None
    timeout: float
    nodes: dict[str, str]  # node -> instance type
    claims: dict[str, dict[str, Any]]  # NodeClaim -> labels
    unused_node_seconds: float
    pods: dict[str, str]
    notes: list[str]

    @property
    def instance_types(self) -> set[str]:
        return set(self.nodes.values())

    def row(self) -> figures.Row:
        counts: dict[str, int] = {}
        for t in self.nodes.values():
            counts[t] = counts.get(t, 0) + 1
        bought = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
        outcome = (f"all {topology.GANG_PODS} pods Running" if self.seconds is not None
                   else f"not running after {self.timeout:.0f} s")
        return figures.Row(SCENARIO, self.path, outcome, self.seconds,
                           f"{len(self.nodes)} ({bought})" if self.nodes else "0",
                           self.unused_node_seconds, "; ".join(self.notes))


async def measure(e2e: harness.Harness, local: cluster.LocalCluster, path: str, job: str,
                  submitted: float, timeout: float) -> Run:
    """Wait (bounded) for all gang pods Running, then collect the figures."""
    async def all_running() -> list[dict[str, Any]] | None:
        pods = await e2e.pods_of_job(job)
        ok = len(pods) == topology.GANG_PODS and all(
            topology._pod_running_since(p) for p in pods)
        return pods if ok else None
    seconds: float | None
    try:
        await e2e.wait_for(all_running, timeout, f"{path}: the gang's pods Running")
        seconds = time.time() - submitted
    except TimeoutError:
        seconds = None
    ended = time.time()
    pods = await e2e.pods_of_job(job)
    first_pod_on: dict[str, float] = {}
    for pod in pods:
        since, node = topology._pod_running_since(pod), pod["spec"].get("nodeName")
        if since is not None and node:
            first_pod_on[node] = min(since, first_pod_on.get(node, since))
    nodes: dict[str, str] = {}
    unused = 0.0
    for node in await e2e.kube.list("v1", "Node", label_selector=NODE_POOL_LABEL):
        name = node["metadata"]["name"]
        nodes[name] = node["metadata"]["labels"].get(INSTANCE_TYPE_LABEL, "?")
        created = topology._ts(node["metadata"]["creationTimestamp"]) or ended
        unused += max(0.0, first_pod_on.get(name, ended) - created)
    claims = {x["metadata"]["name"]: dict(x["metadata"].get("labels") or {})
              for x in node_claims(local)}
    phases = {p["metadata"]["name"]: f"{p['status'].get('phase')}"
              f"@{p['spec'].get('nodeName') or '-'}" for p in pods}
    return Run(path, seconds, timeout, nodes, claims, unused, phases, [])


async def karpenter_said(e2e: harness.Harness) -> list[str]:
    """Karpenter's events about the namespace's pods (its FailedScheduling and Nominated
    messages), oldest first, each once."""
    said: list[str] = []
    for ev in await e2e.kube.list("v1", "Event", e2e.namespace):
        source = (ev.get("source") or {}).get("component") or ev.get("reportingComponent")
        message = str(ev.get("message") or "")
        if source == "karpenter" and (ev.get("involvedObject") or {}).get("kind") == "Pod" \
                and message and message not in said:
            said.append(message)
    return said


async def run_karpenter_alone(e2e: harness.Harness, local: cluster.LocalCluster,
                              timeout: float = KARPENTER_TIMEOUT_S,
                              path: str = "Karpenter alone (DRA off)") -> Run:
    """The gang's pods pending, no admission check: Karpenter chooses by its own
    simulation."""
    await topology.create_claim_template(e2e)
    job = "gang-karpenter"
    submitted = time.time()
    await e2e.create_job(job, None, parallelism=topology.GANG_PODS, cpu=topology.GANG_CPU,
                         claim_template_name=topology.CLAIM_TEMPLATE)
    result = await measure(e2e, local, path, job, submitted, timeout)
    reason = await topology._pending_reason(e2e, job)
    if result.seconds is None and reason:
        result.notes.append(f"pods Pending: {reason}")
    said = await karpenter_said(e2e)
    if said:  # its first reason only: it repeats the reason per claim, "; "-joined
        result.notes.append(f"Karpenter: {said[0].split('; ')[0][:160]}")
    await end_job(e2e, job)
    return result


async def end_job(e2e: harness.Harness, job: str, timeout: float = 60) -> None:
    """Delete ``job`` and wait (bounded) until its pods are gone, so that releasing the
    nodes next evicts nothing."""
    await e2e.kube.delete("batch/v1", "Job", job, e2e.namespace)

    async def pods_gone() -> bool:
        return not await e2e.pods_of_job(job)
    await kube.wait_for(pods_gone, timeout, f"the pods of {job} deleted")


async def run_fitgate(e2e: harness.Harness, local: cluster.LocalCluster, check: str,
                      timeout: float = FITGATE_TIMEOUT_S, path: str = "fitgate",
                      job: str = "gang-fitgate") -> Run:
    """The same gang through fitgate's AdmissionCheck (fitgate must be running with its
    Karpenter support on)."""
    await topology.create_claim_template(e2e)
    for pool in POOLS:
        await e2e.kube.apply(node_shape(pool))
        e2e._cluster_objects.append((topology.SHAPE_API, "NodeShape", pool.name))
    queue = await e2e.create_queues(f"s1k-fitgate-{e2e.namespace}", admission_checks=[check])
    submitted = time.time()
    await e2e.create_job(job, queue, parallelism=topology.GANG_PODS, cpu=topology.GANG_CPU,
                         claim_template_name=topology.CLAIM_TEMPLATE)
    result = await measure(e2e, local, path, job, submitted, timeout)
    ours = [n for n, labels in result.claims.items() if "fitgate.io/workload-uid" in labels]
    result.notes.append(f"{len(result.claims)} NodeClaims, {len(ours)} created by fitgate")
    if result.seconds is None:
        wl = await e2e.workload_of_job(job)
        states = [(c.get("state"), c.get("message", "")[:200])
                  for c in ((wl or {}).get("status") or {}).get("admissionChecks") or []]
        result.notes.append(f"checks {states}")
        reason = await topology._pending_reason(e2e, job)
        if reason:
            result.notes.append(f"pods Pending: {reason}")
    return result


# -- all or nothing ------------------------------------------------------------------------

#: A NodeClass whose nodes register only after 10 minutes: the NodeClaims of its pool
#: launch but never initialize within fitgate's deadline.
SLOW_NODE_CLASS = "slow"
#: Nodes that register 30 s after their NodeClaim: time to crash fitgate in between.
DELAYED_NODE_CLASS = "delayed"
FAST = Pool("aon-fast", "gpu-one-root-8x", 8, "47", "10")
SLOW = Pool("aon-slow", "gpu-one-root-8x", 8, "47", "20")
DELAYED = Pool("crash-delayed", "gpu-one-root-8x", 8, "47", "10")


def setup_all_or_nothing(local: cluster.LocalCluster) -> None:
    """Two NodePools of the same node: ``aon-fast`` and ``aon-slow`` (nodes that register
    after 10 minutes)."""
    slow = node_pool(SLOW)
    slow["spec"]["template"]["spec"]["nodeClassRef"]["name"] = SLOW_NODE_CLASS
    delayed = node_pool(DELAYED)
    delayed["spec"]["template"]["spec"]["nodeClassRef"]["name"] = DELAYED_NODE_CLASS
    local.apply([
        {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
         "metadata": {"name": SLOW_NODE_CLASS},
         "spec": {"nodeRegistrationDelay": "10m"}},
        {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
         "metadata": {"name": DELAYED_NODE_CLASS},
         "spec": {"nodeRegistrationDelay": "30s"}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": dra_driver.SHAPES_CONFIGMAP,
                      "namespace": cluster.SYSTEM_NAMESPACE},
         "data": {p.name: yaml.safe_dump(builders.shape(devices(p)), sort_keys=False)
                  for p in (*POOLS, FAST, SLOW, DELAYED)}},
        node_pool(FAST), slow, delayed])

