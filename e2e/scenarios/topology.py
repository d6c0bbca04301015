"""Scenario 1, topology mismatch: the same gang once with Kueue's built-in
ProvisioningRequest check and once with fitgate, side by side.

Two node groups the autoscaler may grow, per run (so one run's nodes never serve the
other's pods):

- ``cheap``: 8 GPUs split over two PCIe roots (4 + 4), 32 CPUs;
- ``dear``: 8 GPUs on one PCIe root, 48 CPUs, a higher price.

The gang: a Job of 4 pods, each asking for 30 CPUs and 8 GPUs that share one PCIe root
(a ResourceClaimTemplate with ``matchAttribute: resource.kubernetes.io/pcieRoot``).

Kueue's built-in check asks the autoscaler for room for 4 pods of 30 CPUs. This
cluster-autoscaler simulates no DRA (e2e/cluster/local/README.md), so the two groups
differ for it only by CPU, and its least-waste expander picks the cheap one (30 of 32 CPUs
used): 4 nodes arrive, Kueue admits, and the pods stay Pending, because no cheap node has 8
GPUs on one root. fitgate plans against the groups' NodeShapes (devices and all), asks for
4 dear nodes, verifies their ResourceSlices, and the gang runs.

Measured per run: seconds from submit to all pods Running (or "not running after N s"),
the nodes provisioned, and node-seconds provisioned but unused by the gang (for each new
node: from its creation until a gang pod runs on it, or until the end of the run).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from e2e import builders, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import figures

SCENARIO = "1 topology mismatch"
RUN_LABEL = "e2e.fitgate.io/run"
GANG_PODS = 4
GANG_CPU = "30"
GPUS_PER_POD = 8
CLAIM_TEMPLATE = "eight-gpus-one-root"
BUILTIN_TIMEOUT_S = 75.0
FITGATE_TIMEOUT_S = 240.0
SHAPE_API = "fitgate.io/v1alpha1"

PRICES = {"cheap": "10", "dear": "14"}
# One gang pod per node in both groups; for an autoscaler that sees CPU only, the cheap
# group wastes less (least-waste expander): 2 of 32 CPUs against 18 of 48.
CPUS = {"cheap": "32", "dear": "48"}
GPUS_PER_ROOT = {"cheap": 4, "dear": 8}


def group_name(run: str, kind: str) -> str:
    return f"s1-{run}-{kind}"


def node_group(run: str, kind: str) -> cluster.NodeGroup:
    return cluster.NodeGroup(
        name=group_name(run, kind), shape=group_name(run, kind), max_size=GANG_PODS,
        labels={RUN_LABEL: f"s1-{run}"},
        allocatable={"cpu": CPUS[kind], "memory": "256Gi", "pods": "110"},
        devices=builders.gpu_devices(GPUS_PER_POD, per_pcie_root=GPUS_PER_ROOT[kind]))


#: The node groups scenario 1 needs in the cluster (the e2e session and the demo start
#: the local cluster with them).
NODE_GROUPS = tuple(node_group(run, kind) for run in ("builtin", "fitgate")
                    for kind in ("cheap", "dear"))


def node_shape(group: cluster.NodeGroup, price: str) -> dict[str, Any]:
    """The NodeShape that describes ``group`` to fitgate: the template node's labels and
    allocatable, the slice the fake driver publishes for it, a price."""
    template = cluster.template_node(group)
    return {
        "apiVersion": SHAPE_API, "kind": "NodeShape",
        "metadata": {"name": group.name},
        "spec": {
            "nodeLabels": template["metadata"]["labels"],
            "allocatable": dict(group.allocatable),
            "resourceSlices": [{"driver": cluster.DRIVER_NAME,
                                "pool": {"name": "gpus", "resourceSliceCount": 1},
                                "devices": group.devices}],
            "price": price,
            "provisioning": {"className": builders.BEST_EFFORT_ATOMIC},
            "maxNodes": group.max_size,
        },
    }


@dataclasses.dataclass
class Run:
    """What one run measured."""

    check: str
    seconds: float | None                 # submit to all pods Running; None: never
    timeout: float
    nodes: dict[str, list[str]]           # group -> nodes provisioned during the run
    unused_node_seconds: float
    pods: dict[str, str]                  # pod -> phase (and node)
    notes: list[str]

    @property
    def outcome(self) -> str:
        if self.seconds is None:
            return f"not running after {self.timeout:.0f} s"
        return f"all {GANG_PODS} pods Running"

    def row(self) -> figures.Row:
        provisioned = sum(len(v) for v in self.nodes.values())
        groups = ", ".join(f"{len(v)} {g}" for g, v in sorted(self.nodes.items()) if v)
        return figures.Row(SCENARIO, self.check, self.outcome, self.seconds,
                           f"{provisioned} ({groups})" if provisioned else "0",
                           self.unused_node_seconds, "; ".join(self.notes))


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    import datetime
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def _nodes_of_run(e2e: harness.Harness, run: str) -> list[dict[str, Any]]:
    return await e2e.kube.list("v1", "Node", label_selector=f"{RUN_LABEL}=s1-{run}")


def _pod_running_since(pod: dict[str, Any]) -> float | None:
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    ready = kube.condition(pod, "Ready")
    return _ts((ready or {}).get("lastTransitionTime")) or _ts(pod["status"].get("startTime"))


async def _measure(e2e: harness.Harness, run: str, check: str, job: str,
                   submitted: float, timeout: float) -> Run:
    """Wait (bounded) for all gang pods Running, then collect the figures."""
    async def all_running() -> list[dict[str, Any]] | None:
        pods = await e2e.pods_of_job(job)
        ok = len(pods) == GANG_PODS and all(_pod_running_since(p) for p in pods)
        return pods if ok else None
    seconds: float | None
    try:
        await e2e.wait_for(all_running, timeout, f"{check}: the gang's pods Running")
        seconds = time.time() - submitted
    except TimeoutError:
        seconds = None
    ended = time.time()
    pods = await e2e.pods_of_job(job)
    first_pod_on: dict[str, float] = {}
    for pod in pods:
        since, node = _pod_running_since(pod), pod["spec"].get("nodeName")
        if since is not None and node:
            first_pod_on[node] = min(since, first_pod_on.get(node, since))
    nodes: dict[str, list[str]] = {}
    unused = 0.0
    for node in await _nodes_of_run(e2e, run):
        created = _ts(node["metadata"]["creationTimestamp"]) or ended
        group = node["metadata"]["labels"].get(cluster.NODEGROUP_LABEL, "?")
        nodes.setdefault(group, []).append(node["metadata"]["name"])
        unused += max(0.0, first_pod_on.get(node["metadata"]["name"], ended) - created)
    phases = {p["metadata"]["name"]: f"{p['status'].get('phase')}"
              f"@{p['spec'].get('nodeName') or '-'}" for p in pods}
    return Run(check, seconds, timeout, nodes, unused, phases, [])


def _conditions(obj: dict[str, Any] | None) -> str:
    """An object's conditions in one line (type=status reason: message)."""
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: "
                     f"{str(c.get('message', ''))[:160]}" for c in conds) or "no conditions"


async def _pending_reason(e2e: harness.Harness, job: str) -> str:
    """kube-scheduler's latest message about a Pending pod of ``job``."""
    for pod in await e2e.pods_of_job(job):
        cond = kube.condition(pod, "PodScheduled")
        if cond and cond.get("status") == "False" and cond.get("message"):
            return str(cond["message"]).split(". ")[0][:160]  # not the preemption part
    return ""


async def create_claim_template(e2e: harness.Harness) -> None:
    """The pods' claim: 8 GPUs on one PCIe root. Created before the queues, so that
    Kueue's cache holds it when the Workload arrives (a Workload whose template Kueue has
    not seen yet is marked Inadmissible and not retried when the template appears)."""
    if await e2e.kube.get("resource.k8s.io/v1", "ResourceClaimTemplate", CLAIM_TEMPLATE,
                          e2e.namespace) is None:
        await e2e.kube.create(builders.claim_template(
            CLAIM_TEMPLATE, e2e.namespace, GPUS_PER_POD, match_attribute=builders.PCIE_ROOT))


async def submit_gang(e2e: harness.Harness, run: str, queue: str) -> tuple[str, float]:
    job = f"gang-{run}"
    submitted = time.time()
    await e2e.create_job(job, queue, parallelism=GANG_PODS, cpu=GANG_CPU,
                         claim_template_name=CLAIM_TEMPLATE,
                         node_selector={RUN_LABEL: f"s1-{run}"})
    return job, submitted


async def run_builtin(e2e: harness.Harness, timeout: float = BUILTIN_TIMEOUT_S) -> Run:
    """The gang through Kueue's built-in ProvisioningRequest check."""
    await create_claim_template(e2e)
    check = await e2e.create_provisioning_check(f"s1-prov-{e2e.namespace}")
    queue = await e2e.create_queues(f"s1-builtin-{e2e.namespace}", admission_checks=[check])
    job, submitted = await submit_gang(e2e, "builtin", queue)
    result = await _measure(e2e, "builtin", "built-in ProvisioningRequest", job, submitted,
                            timeout)
    wl = await e2e.workload_of_job(job)
    if kube.has_condition(wl, "Admitted"):
        result.notes.append("admitted")
    else:
        result.notes.append(f"not admitted: {_conditions(wl)}")
    reason = await _pending_reason(e2e, job)
    if result.seconds is None and reason:
        result.notes.append(f"pods Pending: {reason}")
    await e2e.kube.delete("batch/v1", "Job", job, e2e.namespace)
    return result


async def create_shapes(e2e: harness.Harness) -> list[str]:
    """NodeShapes for the fitgate run's two node groups (deleted with the test)."""
    names = []
    for kind in ("cheap", "dear"):
        shape = node_shape(node_group("fitgate", kind), PRICES[kind])
        await e2e.kube.apply(shape)
        e2e._cluster_objects.append((SHAPE_API, "NodeShape", shape["metadata"]["name"]))
        names.append(shape["metadata"]["name"])
    return names


async def run_fitgate(e2e: harness.Harness, check: str,
                      timeout: float = FITGATE_TIMEOUT_S) -> Run:
    """The same gang through fitgate's AdmissionCheck ``check`` (fitgate must be running)."""
    await create_claim_template(e2e)
    await create_shapes(e2e)
    queue = await e2e.create_queues(f"s1-fitgate-{e2e.namespace}", admission_checks=[check])
    job, submitted = await submit_gang(e2e, "fitgate", queue)
    result = await _measure(e2e, "fitgate", "fitgate", job, submitted, timeout)
    prs = await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest", e2e.namespace)
    result.notes.append(f"{len(prs)} ProvisioningRequest(s)")
    if result.seconds is None:
        wl = await e2e.workload_of_job(job)
        states = [(c.get("state"), c.get("message", "")[:200])
                  for c in ((wl or {}).get("status") or {}).get("admissionChecks") or []]
        result.notes.append(f"checks {states}; {_conditions(wl)}")
        reason = await _pending_reason(e2e, job)
        if reason:
            result.notes.append(f"pods Pending: {reason}")
    return result
