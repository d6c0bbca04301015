"""Scenarios 2, 4, 5, 8 and 9 (issue #13): gangs fitgate decides on what the cluster has.

Each ``run_*`` function sets up its own namespace's objects (node pools of its own label,
ClusterQueue, claim templates), submits its gangs through fitgate's AdmissionCheck, waits
(bounded) for the outcome and returns what it observed; the tests assert on that. They
share one ``fitgate serve`` and run concurrently (``e2e/tests/test_scenarios_more.py``),
so every pool, queue and claim is namespaced or named after its scenario, and every gang's
nodeSelector keeps it on its own scenario's nodes (or node groups).

- 2, fits already: two racks; the gang asks for one rack
  (``kueue.x-k8s.io/podset-required-topology``) through a Topology-aware ResourceFlavor,
  which Kueue needs for that annotation (a flavor without ``topologyName`` does not
  support it: the Workload would find no flavor). Only rack ``a`` holds the gang.
- 4, partitioned devices: one node, two GPUs, each a counter set of 7 slices and three
  ``3g`` partitions of 3 slices each (so at most two of the three fit one GPU). Two pods
  of two ``3g`` partitions of one GPU fit (one GPU each); a pod of three ``3g`` of one GPU
  has the devices but not the counters, anywhere.
- 5, shared capacity: one device of 80Gi that many claims may share
  (``allowMultipleAllocations``), 60Gi already used by a running job; a gang of 20Gi runs
  on it, one of 30Gi does not.
- 8, minCount: a Job of 6 one-GPU pods with ``kueue.x-k8s.io/job-min-parallelism: 2``
  and quota for 4 GPUs: Kueue admits 4 (partial admission), fitgate places those 4 on
  the one 4-GPU node, without new nodes.
- 9, tenancy: team A's FitPolicy reserves the cheap NodeShape (scenario 1's cheap group)
  for team A's ClusterQueue; the same gang planned for team A asks for a cheap node, for
  team B a dear one, and team B's pod never runs on a cheap node.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import time
from typing import Any

from e2e import builders, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import figures, topology

FITGATE_API = "fitgate.io/v1alpha1"
RUN_LABEL = topology.RUN_LABEL
RACK_LABEL = "e2e.fitgate.io/rack"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
EXPLANATION = "fitgate.io/explanation"
PLAN_ANNOTATION = "fitgate.io/plan"
DRIVER = cluster.DRIVER_NAME
RUN_TIMEOUT_S = 120.0
DECIDE_TIMEOUT_S = 90.0


@dataclasses.dataclass
class Gang:
    """What one gang ended as."""

    job: str
    seconds: float | None = None            # submit to all pods Running; None: never
    admitted: bool = False
    check_message: str = ""                 # fitgate's message in the Workload's checks
    check_state: str = ""
    explanation: str = ""                   # the Job's fitgate.io/explanation, if held
    decision: str = ""                      # fitgate's check state: message that said no
    pods: dict[str, str] = dataclasses.field(default_factory=dict)   # pod -> node
    claims: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    workload: dict[str, Any] | None = None


@dataclasses.dataclass
class Outcome:
    """What one scenario observed."""

    scenario: str
    gangs: dict[str, Gang]
    requests: list[dict[str, Any]]           # ProvisioningRequests in the namespace
    nodes: dict[str, dict[str, str]]         # node -> labels, of the scenario's nodes
    notes: list[str] = dataclasses.field(default_factory=list)

    def row(self, gang: str, outcome: str) -> figures.Row:
        g = self.gangs[gang]
        # The autoscaler's nodes this gang's pods run on.
        groups = collections.Counter(self.nodes[n][cluster.NODEGROUP_LABEL]
                                     for n in set(g.pods.values())
                                     if cluster.NODEGROUP_LABEL in self.nodes.get(n, {}))
        provisioned = sum(groups.values())
        nodes = (f"{provisioned} ({', '.join(f'{n} {g}' for g, n in sorted(groups.items()))})"
                 if provisioned else "0")
        return figures.Row(self.scenario, "fitgate", outcome, g.seconds, nodes, None,
                           f"{len(self.requests)} ProvisioningRequest(s)")


# -- building blocks ---------------------------------------------------------------------


def job(e2e: harness.Harness, name: str, queue: str, pods: int, cpu: str, template: str,
        selector: dict[str, str], annotations: dict[str, str] | None = None,
        pod_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body = builders.job(name, e2e.namespace, queue, pods, cpu, template, selector)
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    if pod_annotations:
        body["spec"]["template"]["metadata"]["annotations"] = dict(pod_annotations)
    return body


async def queues(e2e: harness.Harness, name: str, flavor: dict[str, Any] | None = None,
                 quota: dict[str, str] | None = None, check: str = "") -> str:
    """ClusterQueue + LocalQueue ``name`` with fitgate's check; ``flavor`` (a
    ResourceFlavor manifest) instead of the shared default one."""
    if flavor is None:
        return await e2e.create_queues(name, quota=quota, admission_checks=[check])
    await e2e.kube.apply(flavor)
    e2e._cluster_objects.append((builders.KUEUE, "ResourceFlavor", flavor["metadata"]["name"]))
    await e2e.kube.apply(builders.cluster_queue(name, flavor["metadata"]["name"], quota,
                                                [check]))
    e2e._cluster_objects.append((builders.KUEUE, "ClusterQueue", name))
    await e2e.kube.apply(builders.local_queue(name, e2e.namespace, name))

    async def active() -> bool:
        return kube.has_condition(await e2e.kube.get(builders.KUEUE, "ClusterQueue", name),
                                  "Active")
    await e2e.wait_for(active, harness.DEFAULT_TIMEOUT_S, f"ClusterQueue {name} Active")
    return name


async def cluster_object(e2e: harness.Harness, obj: dict[str, Any]) -> None:
    """Apply a cluster-scoped object the harness deletes after the test."""
    await e2e.kube.apply(obj)
    e2e._cluster_objects.append((obj["apiVersion"], obj["kind"], obj["metadata"]["name"]))


def claim_template(name: str, namespace: str, count: int, cel: str | None = None,
                   match_attribute: str | None = None,
                   capacity: dict[str, str] | None = None) -> dict[str, Any]:
    body = builders.claim_template(name, namespace, count, match_attribute=match_attribute)
    exactly = body["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return body


def _check_entry(wl: dict[str, Any] | None, check: str) -> dict[str, Any]:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == check:
            return dict(entry)
    return {}


async def _job_annotation(e2e: harness.Harness, name: str, key: str) -> str:
    j = await e2e.kube.get("batch/v1", "Job", name, e2e.namespace)
    return str(((j or {}).get("metadata", {}).get("annotations") or {}).get(key, ""))


async def claims_of(e2e: harness.Harness, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The allocation results of a pod's ResourceClaims (device, pool, consumedCapacity)."""
    out: list[dict[str, Any]] = []
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        name = status.get("resourceClaimName")
        if not name:
            continue
        claim = await e2e.kube.get("resource.k8s.io/v1", "ResourceClaim", name,
                                   e2e.namespace)
        alloc = ((claim or {}).get("status") or {}).get("allocation") or {}
        out.extend((alloc.get("devices") or {}).get("results") or [])
    return out


async def observe(e2e: harness.Harness, name: str, check: str, submitted: float,
                  running_pods: int | None, timeout: float) -> Gang:
    """Wait (bounded) until ``running_pods`` pods of job ``name`` run (None: until fitgate
    decided against it: an explanation on the Job, or a check message saying why not),
    then read what happened."""
    gang = Gang(name)

    async def done() -> bool:
        if running_pods is not None:
            pods = await e2e.pods_of_job(name)
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            return len(running) >= running_pods
        if await _job_annotation(e2e, name, EXPLANATION):
            return True
        entry = _check_entry(await e2e.workload_of_job(name), check)
        message = str(entry.get("message") or "")
        if entry.get("state") in ("Retry", "Rejected", "Pending") and (
                message.startswith(("capacity: does not fit", "configuration"))):
            gang.decision = f"{entry.get('state')}: {message}"
            return True
        return False
    try:
        await e2e.wait_for(done, timeout, f"job {name} decided", interval=1.0)
        if running_pods is not None:
            gang.seconds = time.time() - submitted
    except TimeoutError:
        pass
    wl = await e2e.workload_of_job(name)
    gang.workload = wl
    gang.admitted = kube.has_condition(wl, "Admitted")
    entry = _check_entry(wl, check)
    gang.check_state = str(entry.get("state") or "")
    gang.check_message = str(entry.get("message") or "")
    gang.explanation = await _job_annotation(e2e, name, EXPLANATION)
    for pod in await e2e.pods_of_job(name):
        if (pod.get("status") or {}).get("phase") == "Running":
            gang.pods[pod["metadata"]["name"]] = str(pod["spec"].get("nodeName"))
            gang.claims[pod["metadata"]["name"]] = await claims_of(e2e, pod)
    return gang


async def _submit_and_observe(e2e: harness.Harness, body: dict[str, Any], check: str,
                              running_pods: int | None, timeout: float = RUN_TIMEOUT_S
                              ) -> Gang:
    submitted = time.time()
    await e2e.kube.create(body)
    return await observe(e2e, body["metadata"]["name"], check, submitted, running_pods,
                         timeout)


async def _outcome(e2e: harness.Harness, scenario: str, gangs: list[Gang],
                   node_selector: str) -> Outcome:
    requests = await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest",
                                   e2e.namespace)
    nodes = {n["metadata"]["name"]: dict(n["metadata"].get("labels") or {})
             for n in await e2e.kube.list("v1", "Node", label_selector=node_selector)}
    return Outcome(scenario, {g.job: g for g in gangs}, requests, nodes)


# -- scenario 2: fits already, pinned to one rack ---------------------------------------


async def run_fits_on_rack(e2e: harness.Harness, check: str) -> Outcome:
    """Two racks of two nodes (8 GPUs, 4 per PCIe root); rack ``b``'s nodes have 12 CPUs,
    room for one 10-CPU pod each. A gang of 4 pods (10 CPUs, 4 GPUs of one root) asks for
    one rack: only rack ``a`` holds it, and it is there already: no new nodes."""
    run = f"s2-{e2e.namespace}"
    devices = builders.gpu_devices(8, per_pcie_root=4)
    for rack, cpu in (("a", "32"), ("b", "12")):
        await e2e.create_node_pool(f"s2-{e2e.namespace[-8:]}-{rack}", 2, devices,
                                   labels={RUN_LABEL: run, RACK_LABEL: f"rack-{rack}"},
                                   allocatable={"cpu": cpu, "memory": "256Gi",
                                                "pods": "110"})
    topo = f"s2-{e2e.namespace}"
    await cluster_object(e2e, {"apiVersion": builders.KUEUE, "kind": "Topology",
                               "metadata": {"name": topo},
                               "spec": {"levels": [{"nodeLabel": RACK_LABEL}]}})
    flavor = builders.resource_flavor(f"s2-{e2e.namespace}", {RUN_LABEL: run})
    flavor["spec"]["topologyName"] = topo
    await e2e.kube.create(claim_template("four-gpus-one-root", e2e.namespace, 4,
                                         match_attribute=builders.PCIE_ROOT))
    queue = await queues(e2e, f"s2-{e2e.namespace}", flavor=flavor, check=check)
    gang = await _submit_and_observe(
        e2e, job(e2e, "rack-gang", queue, 4, "10", "four-gpus-one-root", {RUN_LABEL: run},
                 pod_annotations={REQUIRED_TOPOLOGY: RACK_LABEL}), check, 4)
    return await _outcome(e2e, "2 fits already (one rack)", [gang], f"{RUN_LABEL}={run}")


# -- scenario 4: partitioned devices -----------------------------------------------------

PARTITION_SLICES = 7     # counter "slices" of one GPU
PARTITION_3G = 3         # slices a 3g partition consumes


def partitioned_gpus(gpus: int = 2, per_gpu: int = 3) -> tuple[list[dict[str, Any]],
                                                                 list[dict[str, Any]]]:
    """(devices, counter sets): per GPU a counter set of 7 slices and ``per_gpu`` 3g
    partitions of 3 slices each, with the GPU they belong to as attribute ``parent``."""
    counters = [{"name": f"gpu-{g}", "counters": {"slices": {"value": str(PARTITION_SLICES)}}}
                for g in range(gpus)]
    devices = [{"name": f"gpu-{g}-3g-{k}",
                "attributes": {"profile": {"string": "3g"}, "parent": {"string": f"gpu-{g}"}},
                "consumesCounters": [{"counterSet": f"gpu-{g}",
                                      "counters": {"slices": {"value": str(PARTITION_3G)}}}]}
               for g in range(gpus) for k in range(per_gpu)]
    return devices, counters


async def run_partitions(e2e: harness.Harness, check: str) -> Outcome:
    run = f"s4-{e2e.namespace}"
    pool = f"s4-{e2e.namespace[-8:]}"
    devices, counters = partitioned_gpus()
    await e2e.define_shape(pool, {**builders.shape(devices), "sharedCounters": counters})
    names = [f"{pool}-0"]
    for node in names:
        await e2e.kube.create(builders.kwok_node(node, pool, {RUN_LABEL: run}))
        e2e._cluster_objects.append(("v1", "Node", node))
    await e2e.wait_nodes_ready(names)
    await e2e.wait_slices(names)
    # Guarded: Kueue evaluates the selector against every device of the class (the other
    # scenarios' GPUs have no profile) and calls a missing key an invalid selector.
    cel = (f'"profile" in device.attributes["{DRIVER}"] && '
           f'device.attributes["{DRIVER}"].profile == "3g"')
    parent = f"{DRIVER}/parent"
    await e2e.kube.create(claim_template("two-3g-one-gpu", e2e.namespace, 2, cel, parent))
    await e2e.kube.create(claim_template("three-3g-one-gpu", e2e.namespace, 3, cel, parent))
    queue = await queues(e2e, f"s4-{e2e.namespace}", check=check)
    fits, never = await asyncio.gather(
        _submit_and_observe(e2e, job(e2e, "two-of-one-gpu", queue, 2, "1", "two-3g-one-gpu",
                                     {RUN_LABEL: run}), check, 2),
        _submit_and_observe(e2e, job(e2e, "three-of-one-gpu", queue, 1, "1",
                                     "three-3g-one-gpu", {RUN_LABEL: run}),
                            check, None, DECIDE_TIMEOUT_S))
    return await _outcome(e2e, "4 partitioned devices", [fits, never], f"{RUN_LABEL}={run}")


# -- scenario 5: shared capacity ---------------------------------------------------------

SHARED_MEMORY = "80Gi"


def shared_device() -> list[dict[str, Any]]:
    return [{"name": "shared-0", "allowMultipleAllocations": True,
             "attributes": {"model": {"string": "shared"}},
             "capacity": {"memory": {"value": SHARED_MEMORY}}}]


async def run_shared_capacity(e2e: harness.Harness, check: str) -> Outcome:
    run = f"s5-{e2e.namespace}"
    await e2e.create_node_pool(f"s5-{e2e.namespace[-8:]}", 1, shared_device(),
                               labels={RUN_LABEL: run})
    for gi in (20, 30):
        await e2e.kube.create(claim_template(f"mem-{gi}gi", e2e.namespace, 1,
                                             capacity={"memory": f"{gi}Gi"}))
    # Already running, outside Kueue: two pods of 30Gi each on the device (60 of 80Gi).
    await e2e.create_job("background", None, parallelism=2, claim_template_name="mem-30gi",
                         node_selector={RUN_LABEL: run})
    background = await observe(e2e, "background", check, time.time(), 2, RUN_TIMEOUT_S)
    queue = await queues(e2e, f"s5-{e2e.namespace}", check=check)
    fits, no = await asyncio.gather(
        _submit_and_observe(e2e, job(e2e, "twenty-gi", queue, 1, "1", "mem-20gi",
                                     {RUN_LABEL: run}), check, 1),
        _submit_and_observe(e2e, job(e2e, "thirty-gi", queue, 1, "1", "mem-30gi",
                                     {RUN_LABEL: run}), check, None, DECIDE_TIMEOUT_S))
    return await _outcome(e2e, "5 shared capacity", [background, fits, no],
                          f"{RUN_LABEL}={run}")


# -- scenario 8: minCount ----------------------------------------------------------------

MIN_COUNT_PODS = 6
MIN_COUNT_QUOTA = 4


async def run_min_count(e2e: harness.Harness, check: str) -> Outcome:
    run = f"s8-{e2e.namespace}"
    await e2e.create_node_pool(f"s8-{e2e.namespace[-8:]}", 1,
                               builders.gpu_devices(MIN_COUNT_QUOTA, per_pcie_root=2),
                               labels={RUN_LABEL: run})
    await e2e.kube.create(builders.claim_template("one-gpu", e2e.namespace, 1))
    queue = await queues(e2e, f"s8-{e2e.namespace}", check=check,
                         quota={"cpu": "100", "memory": "1Ti",
                                builders.KUEUE_DRA_RESOURCE: str(MIN_COUNT_QUOTA)})
    gang = await _submit_and_observe(
        e2e, job(e2e, "partial", queue, MIN_COUNT_PODS, "1", "one-gpu", {RUN_LABEL: run},
                 annotations={MIN_PARALLELISM: "2"}), check, MIN_COUNT_QUOTA)
    return await _outcome(e2e, "8 gang with minCount", [gang], f"{RUN_LABEL}={run}")


def admitted_count(wl: dict[str, Any] | None) -> int | None:
    for a in (((wl or {}).get("status") or {}).get("admission") or {}).get(
            "podSetAssignments") or []:
        return int(a.get("count", -1))
    return None


# -- scenario 9: tenancy ------------------------------------------------------------------

TEAM_CLAIM = "four-gpus-one-root"


def plan_shapes(request: dict[str, Any]) -> set[str]:
    """The NodeShapes a fitgate ProvisioningRequest's plan asks for."""
    raw = (request["metadata"].get("annotations") or {}).get(PLAN_ANNOTATION) or "{}"
    return {str(s.get("shape")) for s in json.loads(raw).get("shapes") or []}


async def run_tenancy(e2e: harness.Harness, check: str) -> Outcome:
    """Scenario 1's fitgate node groups: cheap (8 GPUs over two roots) and dear (8 on one),
    one 30-CPU pod per node. The gang (one pod of 4 GPUs on one root) fits either; the
    cheap one wins on price, unless a FitPolicy reserves it for another team."""
    cheap, dear = (topology.group_name("fitgate", k) for k in ("cheap", "dear"))
    await topology.create_shapes(e2e)
    await e2e.kube.create(builders.claim_template(TEAM_CLAIM, e2e.namespace, 4,
                                                  match_attribute=builders.PCIE_ROOT))
    team_a = await queues(e2e, f"s9-a-{e2e.namespace}", check=check)
    team_b = await queues(e2e, f"s9-b-{e2e.namespace}", check=check)
    await cluster_object(e2e, {
        "apiVersion": FITGATE_API, "kind": "FitPolicy",
        "metadata": {"name": f"s9-team-a-{e2e.namespace}"},
        "spec": {"subjects": {"clusterQueues": [team_a]},
                 "reserved": {"nodeShapes": [cheap],
                              "nodes": {"matchLabels": {cluster.NODEGROUP_LABEL: cheap}}}}})
    selector = {RUN_LABEL: "s1-fitgate"}
    a, b = await asyncio.gather(
        _submit_and_observe(e2e, job(e2e, "team-a", team_a, 1, topology.GANG_CPU,
                                     TEAM_CLAIM, selector), check, 1, 180.0),
        _submit_and_observe(e2e, job(e2e, "team-b", team_b, 1, topology.GANG_CPU,
                                     TEAM_CLAIM, selector), check, 1, 180.0))
    out = await _outcome(e2e, "9 tenancy", [a, b], f"{RUN_LABEL}=s1-fitgate")
    out.notes.append(f"shapes {cheap} (reserved for team A), {dear}")
    return out


def requests_of(outcome: Outcome, job_name: str) -> list[dict[str, Any]]:
    """The fitgate ProvisioningRequests of one gang (by its Workload's uid)."""
    wl = outcome.gangs[job_name].workload or {}
    uid = (wl.get("metadata") or {}).get("uid")
    return [r for r in outcome.requests
            if (r["metadata"].get("labels") or {}).get("fitgate.io/workload-uid") == uid]
