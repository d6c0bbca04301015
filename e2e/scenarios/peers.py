"""The peers at their best (issue #19): the same gangs through four ways of getting
capacity, on one cluster whose cluster-autoscaler runs its DRA simulation
(``--enable-dynamic-resource-allocation``, ``LocalCluster.configure_autoscaler``).

Baselines (``BASELINES``):

- ``bz``: Kueue's built-in ProvisioningRequest check (best-effort-atomic class), node
  groups scaled from zero, the autoscaler's usual case;
- ``bl``: the same with one live node in each group before the Job arrives, so the
  autoscaler's template for the group is that node, ResourceSlices included (its best
  case);
- ``nz``: no Kueue at all: the Job's pods are created at once and wait Pending; the
  autoscaler grows the cluster for them pod by pod (the project's premise), from zero;
- ``nl``: the same with one live node per group;
- ``fg``: fitgate's AdmissionCheck, node groups from zero, NodeShapes describing them.

Scenarios (``SCENARIOS``), each a gang and a few node groups of its own per baseline
(``p<scenario>-<baseline>-<kind>``, labelled ``e2e.fitgate.io/run=p<scenario>-<baseline>``
and selected by the gang's nodeSelector, so no baseline's nodes serve another's pods):

1. topology mismatch (issue #13's scenario 1): 4 pods of 30 CPUs and 8 GPUs on one PCIe
   root; ``cheap`` nodes split their 8 GPUs over two roots, ``dear`` nodes have one root.
2. MIG-style partitions: 2 pods of 30 CPUs, each 2 ``3g`` partitions of one GPU;
   ``cheap`` nodes' two GPUs are already split into seven ``1g`` partitions each,
   ``dear`` nodes' into two ``3g`` each.
3. rack-scoped gang that needs a fresh rack: 3 pods of 30 CPUs and 4 GPUs of one root,
   all in one rack (required pod affinity on the rack label, which kube-scheduler and the
   autoscaler read; ``fitgate.io/required-topology``, which fitgate reads); rack ``a``
   (cheap) has room for 2 more nodes, rack ``b`` (dear) for 4.
4. shared consumable capacity: 6 pods of 1 CPU, each 20Gi of a device of 80Gi that many
   claims may share (``allowMultipleAllocations``): 4 pods per node.

Every cell (baseline × scenario) runs concurrently with the others and is measured the
same way (``Cell``): whether all pods ran and how long after submission, the nodes
bought during the run by group (live nodes made before the run are not counted), the
node-seconds bought but unused by the gang (per bought node: from its creation until a
gang pod runs on it, or until the cell's end), and their cost at the groups' prices
(price × node-hours, the prices of the NodeShapes fitgate gets). The notes say what the
peers reported (Workload conditions, ProvisioningRequest conditions, the scheduler's
reason for a Pending pod).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Callable
from typing import Any

from e2e import builders, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import figures, topology

RUN_LABEL = topology.RUN_LABEL
RACK_LABEL = "e2e.fitgate.io/rack"
FITGATE_TOPOLOGY = "fitgate.io/required-topology"
DRIVER = cluster.DRIVER_NAME
PEER_TIMEOUT_S = 60.0
FITGATE_TIMEOUT_S = 150.0
LIVE_TIMEOUT_S = 120.0
QUOTA = {"cpu": "2000", "memory": "20Ti", builders.KUEUE_DRA_RESOURCE: "512"}


@dataclasses.dataclass(frozen=True)
class Baseline:
    key: str         # in group and job names
    title: str       # the table's "check" column
    queue: str       # "builtin", "none" or "fitgate"
    live: bool       # one live node per group before the Job arrives


BASELINES = (
    Baseline("bz", "built-in ProvReq, CA+DRA, from zero", "builtin", False),
    Baseline("bl", "built-in ProvReq, CA+DRA, 1 live node/group", "builtin", True),
    Baseline("nz", "no Kueue, CA+DRA, from zero", "none", False),
    Baseline("nl", "no Kueue, CA+DRA, 1 live node/group", "none", True),
    Baseline("fg", "fitgate", "fitgate", False),
)
BY_KEY = {b.key: b for b in BASELINES}


@dataclasses.dataclass(frozen=True)
class Kind:
    """One node group of a scenario (per baseline)."""

    name: str
    cpu: str
    price: str
    max_size: int
    devices: list[dict[str, Any]]
    fits: bool        # can a node of this kind host a gang pod at all


@dataclasses.dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    kinds: tuple[Kind, ...]
    pods: int
    cpu: str
    claim: Callable[[str, str], dict[str, Any]]   # (name, namespace) -> template
    fitting: str      # the kind a from-zero plan uses
    new_nodes: int    # how many nodes of it a from-zero plan needs
    rack: bool = False

    @property
    def claim_name(self) -> str:
        return f"p{self.key}-claim"


def partitions(gpus: int, profile: str, per_gpu: int, memory: str) -> list[dict[str, Any]]:
    """Static MIG-style partitions: ``per_gpu`` devices of ``profile`` per GPU, each with
    its GPU as attribute ``parent``."""
    return [{"name": f"gpu-{g}-{profile}-{k}",
             "attributes": {"profile": {"string": profile}, "parent": {"string": f"gpu-{g}"}},
             "capacity": {"memory": {"value": memory}}}
            for g in range(gpus) for k in range(per_gpu)]


def shared_device(memory: str = "80Gi") -> list[dict[str, Any]]:
    return [{"name": "shared-0", "allowMultipleAllocations": True,
             "attributes": {"model": {"string": "shared"}},
             "capacity": {"memory": {"value": memory}}}]


def _claim(count: int, match_attribute: str | None = None, cel: str | None = None,
           capacity: dict[str, str] | None = None) -> Callable[[str, str], dict[str, Any]]:
    def make(name: str, namespace: str) -> dict[str, Any]:
        body = builders.claim_template(name, namespace, count, match_attribute=match_attribute)
        exactly = body["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        if cel:
            exactly["selectors"] = [{"cel": {"expression": cel}}]
        if capacity:
            exactly["capacity"] = {"requests": dict(capacity)}
        return body
    return make


# Guarded: Kueue and the schedulers evaluate the selector on every device of the class,
# and the other scenarios' devices have no "profile".
_3G = (f'"profile" in device.attributes["{DRIVER}"] && '
       f'device.attributes["{DRIVER}"].profile == "3g"')

SCENARIOS = (
    Scenario("1", "1 topology mismatch", (
        Kind("cheap", "32", "10", 4, builders.gpu_devices(8, per_pcie_root=4), False),
        Kind("dear", "48", "14", 4, builders.gpu_devices(8, per_pcie_root=8), True)),
        pods=4, cpu="30", claim=_claim(8, match_attribute=builders.PCIE_ROOT),
        fitting="dear", new_nodes=4),
    Scenario("2", "2 MIG split the wrong way", (
        Kind("cheap", "32", "10", 2, partitions(2, "1g", 7, "10Gi"), False),
        Kind("dear", "48", "14", 2, partitions(2, "3g", 2, "40Gi"), True)),
        pods=2, cpu="30", claim=_claim(2, match_attribute=f"{DRIVER}/parent", cel=_3G),
        fitting="dear", new_nodes=2),
    Scenario("3", "3 rack gang, fresh rack", (
        Kind("rack-a", "32", "10", 2, builders.gpu_devices(8, per_pcie_root=4), True),
        Kind("rack-b", "48", "14", 4, builders.gpu_devices(8, per_pcie_root=4), True)),
        pods=3, cpu="30", claim=_claim(4, match_attribute=builders.PCIE_ROOT),
        fitting="rack-b", new_nodes=3, rack=True),
    Scenario("4", "4 shared capacity", (
        Kind("shared", "32", "10", 4, shared_device(), True),),
        pods=6, cpu="1", claim=_claim(1, capacity={"memory": "20Gi"}),
        fitting="shared", new_nodes=2),
)
BY_SCENARIO = {s.key: s for s in SCENARIOS}


def prefix(scenario: Scenario, baseline: Baseline) -> str:
    return f"p{scenario.key}-{baseline.key}"


def group_name(scenario: Scenario, baseline: Baseline, kind: str) -> str:
    return f"{prefix(scenario, baseline)}-{kind}"


def node_group(scenario: Scenario, baseline: Baseline, kind: Kind) -> cluster.NodeGroup:
    name = group_name(scenario, baseline, kind.name)
    labels = {RUN_LABEL: prefix(scenario, baseline)}
    if scenario.rack:
        labels[RACK_LABEL] = name  # one rack per group, its own per cell
    return cluster.NodeGroup(name=name, shape=name, max_size=kind.max_size, labels=labels,
                             allocatable={"cpu": kind.cpu, "memory": "256Gi", "pods": "110"},
                             devices=kind.devices)


def node_groups(scenarios: tuple[str, ...] = tuple(BY_SCENARIO),
                baselines: tuple[str, ...] = tuple(BY_KEY)) -> tuple[cluster.NodeGroup, ...]:
    """The node groups the cluster must start with to run these cells."""
    return tuple(node_group(BY_SCENARIO[s], BY_KEY[b], k)
                 for s in scenarios for b in baselines for k in BY_SCENARIO[s].kinds)


#: Every cell's node groups (the e2e session starts the local cluster with them).
NODE_GROUPS = node_groups()


def job_body(e2e: harness.Harness, scenario: Scenario, baseline: Baseline,
             queue: str | None) -> dict[str, Any]:
    """The scenario's gang as a Job; the same for every baseline but for its name, queue
    and the nodeSelector that keeps it on its own cell's node groups."""
    name = prefix(scenario, baseline)
    body = builders.job(name, e2e.namespace, queue, scenario.pods, scenario.cpu,
                        scenario.claim_name, {RUN_LABEL: name})
    if scenario.rack:
        template = body["spec"]["template"]
        template["metadata"]["annotations"] = {FITGATE_TOPOLOGY: RACK_LABEL}
        template["spec"]["affinity"] = {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": name}},
                "topologyKey": RACK_LABEL}]}}
    return body


# -- what a cell measured ----------------------------------------------------------------


@dataclasses.dataclass
class Cell:
    scenario: Scenario
    baseline: Baseline
    timeout: float
    seconds: float | None = None                   # submit to all pods Running
    running: int = 0                               # gang pods Running at the end
    admitted: bool | None = None                   # None: no Kueue
    bought: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # kind -> nodes
    live: dict[str, list[str]] = dataclasses.field(default_factory=dict)    # kind -> nodes
    hosts: dict[str, str] = dataclasses.field(default_factory=dict)         # pod -> kind
    unused_node_seconds: float = 0.0
    cost: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)
    error: str = ""

    @property
    def outcome(self) -> str:
        if self.error:
            return f"error: {self.error}"
        n = self.scenario.pods
        if self.seconds is not None:
            return f"all {n} pods Running"
        if self.admitted is False:
            return f"not admitted after {self.timeout:.0f} s"
        return f"{self.running} of {n} pods Running after {self.timeout:.0f} s"

    def row(self) -> figures.Row:
        bought = sum(len(v) for v in self.bought.values())
        groups = ", ".join(f"{len(v)} {k}" for k, v in sorted(self.bought.items()) if v)
        nodes = f"{bought} ({groups})" if bought else "0"
        notes = list(self.notes)
        live = sum(len(v) for v in self.live.values())
        if live:
            on_live = sum(1 for p, k in self.hosts.items() if k.startswith("live "))
            notes.insert(0, f"{live} live node(s) before, {on_live} pod(s) on them")
        return figures.Row(self.scenario.title, self.baseline.title, self.outcome,
                           self.seconds, nodes, self.unused_node_seconds, "; ".join(notes),
                           cost=self.cost)


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _running_since(pod: dict[str, Any]) -> float | None:
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    ready = kube.condition(pod, "Ready")
    return _ts((ready or {}).get("lastTransitionTime")) or _ts(pod["status"].get("startTime"))


def _conditions(obj: dict[str, Any] | None, types: tuple[str, ...] = ()) -> str:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: "
                     f"{str(c.get('message', ''))[:140]}" for c in conds
                     if not types or c.get("type") in types) or "no conditions"


async def _cell_nodes(e2e: harness.Harness, scenario: Scenario, baseline: Baseline
                      ) -> list[dict[str, Any]]:
    return await e2e.kube.list("v1", "Node",
                               label_selector=f"{RUN_LABEL}={prefix(scenario, baseline)}")


def _kind_of(node: dict[str, Any], scenario: Scenario, baseline: Baseline) -> str:
    group = str(node["metadata"]["labels"].get(cluster.NODEGROUP_LABEL, ""))
    return group.removeprefix(prefix(scenario, baseline) + "-")


# -- running the cells -------------------------------------------------------------------


async def make_live_nodes(e2e: harness.Harness, cells: list[Cell]) -> None:
    """One live node in every group of the live baselines' cells, as a user's cluster
    has them: a small pod without claims per group makes the autoscaler add a node
    there; the pod is deleted once it ran (scale-down is off, so the node stays) and the
    node has published its ResourceSlices."""
    groups = [group_name(c.scenario, c.baseline, k.name)
              for c in cells if c.baseline.live for k in c.scenario.kinds]
    if not groups:
        return
    for group in groups:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"warm-{group}", "namespace": e2e.namespace,
                            "labels": {"app": "warm-up"}},
               "spec": builders.pod_spec("1", None, {cluster.NODEGROUP_LABEL: group})}
        await e2e.kube.create(pod)

    async def all_running() -> bool:
        pods = await e2e.kube.list("v1", "Pod", e2e.namespace, label_selector="app=warm-up")
        return len(pods) == len(groups) and all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods)
    await e2e.wait_for(all_running, LIVE_TIMEOUT_S, f"a live node in each of {groups}")
    for group in groups:
        await e2e.kube.delete("v1", "Pod", f"warm-{group}", e2e.namespace)

    async def gone() -> bool:
        return not await e2e.kube.list("v1", "Pod", e2e.namespace,
                                       label_selector="app=warm-up")
    await e2e.wait_for(gone, harness.DEFAULT_TIMEOUT_S, "warm-up pods deleted")
    for cell in cells:
        if not cell.baseline.live:
            continue
        nodes = await _cell_nodes(e2e, cell.scenario, cell.baseline)
        for node in nodes:
            kind = _kind_of(node, cell.scenario, cell.baseline)
            cell.live.setdefault(kind, []).append(node["metadata"]["name"])
        await e2e.wait_slices([n["metadata"]["name"] for n in nodes])


async def run_cell(e2e: harness.Harness, cell: Cell, queue: str | None) -> Cell:
    """Submit the cell's gang, wait (bounded) until all its pods run, then measure."""
    scenario, baseline = cell.scenario, cell.baseline
    body = job_body(e2e, scenario, baseline, queue)
    job = body["metadata"]["name"]
    submitted = time.time()
    await e2e.kube.create(body)

    async def all_running() -> bool:
        pods = await e2e.pods_of_job(job)
        return len(pods) == scenario.pods and all(_running_since(p) for p in pods)
    try:
        await e2e.wait_for(all_running, cell.timeout, f"{job}: the gang's pods Running",
                           interval=1.0)
        cell.seconds = time.time() - submitted
    except TimeoutError:
        pass
    ended = time.time()
    pods = await e2e.pods_of_job(job)
    live = {n for nodes in cell.live.values() for n in nodes}
    first_pod_on: dict[str, float] = {}
    for pod in pods:
        since, node = _running_since(pod), pod["spec"].get("nodeName")
        if since is not None and node:
            cell.running += 1
            first_pod_on[node] = min(since, first_pod_on.get(node, since))
    prices = {k.name: float(k.price) for k in scenario.kinds}
    for node in await _cell_nodes(e2e, scenario, baseline):
        name = node["metadata"]["name"]
        kind = _kind_of(node, scenario, baseline)
        for pod in pods:
            if pod["spec"].get("nodeName") == name and _running_since(pod):
                cell.hosts[pod["metadata"]["name"]] = f"live {kind}" if name in live else kind
        if name in live:
            continue
        cell.bought.setdefault(kind, []).append(name)
        created = _ts(node["metadata"]["creationTimestamp"]) or ended
        unused = max(0.0, first_pod_on.get(name, ended) - max(created, submitted))
        cell.unused_node_seconds += unused
        cell.cost += prices.get(kind, 0.0) * unused / 3600
    await _explain(e2e, cell, job)
    return cell


async def _explain(e2e: harness.Harness, cell: Cell, job: str) -> None:
    """What the peers said: Kueue's Workload and check, the ProvisioningRequests'
    conditions, the scheduler's reason for a Pending pod."""
    if cell.baseline.queue != "none":
        wl = await e2e.workload_of_job(job)
        cell.admitted = kube.has_condition(wl, "Admitted")
        if not cell.admitted:
            checks = [f"{c.get('state')}: {str(c.get('message', ''))[:160]}"
                      for c in ((wl or {}).get("status") or {}).get("admissionChecks") or []]
            cell.notes.append(f"check {'; '.join(checks) or 'none'}")
        uid = ((wl or {}).get("metadata") or {}).get("uid", "")
        mine = [r for r in await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest",
                                               e2e.namespace)
                if uid and (any(ref.get("uid") == uid
                                for ref in r["metadata"].get("ownerReferences") or [])
                            or (r["metadata"].get("labels") or {}).get(
                                "fitgate.io/workload-uid") == uid)]
        cell.notes.append(f"{len(mine)} ProvisioningRequest(s)")
        if mine and cell.baseline.queue == "builtin":
            cell.notes.append("ProvReq " + _conditions(mine[-1], ("Provisioned", "Failed")))
    if cell.seconds is None:
        for pod in await e2e.pods_of_job(job):
            cond = kube.condition(pod, "PodScheduled")
            if cond and cond.get("status") == "False" and cond.get("message"):
                cell.notes.append("pod Pending: "
                                  + str(cond["message"]).split(". ")[0][:160])
                break


async def create_shapes(e2e: harness.Harness, cells: list[Cell]) -> None:
    """NodeShapes for fitgate's cells' node groups (deleted with the test)."""
    for cell in cells:
        if cell.baseline.queue != "fitgate":
            continue
        for kind in cell.scenario.kinds:
            group = node_group(cell.scenario, cell.baseline, kind)
            shape = topology.node_shape(group, kind.price)
            await e2e.kube.apply(shape)
            e2e._cluster_objects.append((topology.SHAPE_API, "NodeShape", group.name))


async def run(e2e: harness.Harness, fitgate_check: str | None,
              scenarios: tuple[str, ...] = tuple(BY_SCENARIO),
              baselines: tuple[str, ...] = tuple(BY_KEY),
              peer_timeout: float = PEER_TIMEOUT_S,
              fitgate_timeout: float = FITGATE_TIMEOUT_S) -> list[Cell]:
    """Run the cells (every scenario × baseline asked for) concurrently; the autoscaler
    must run with its DRA simulation on, fitgate (for ``fg``) with ``fitgate_check``."""
    cells = [Cell(BY_SCENARIO[s], BY_KEY[b],
                  fitgate_timeout if BY_KEY[b].queue == "fitgate" else peer_timeout)
             for s in scenarios for b in baselines]
    for key in scenarios:
        scenario = BY_SCENARIO[key]
        await e2e.kube.create(scenario.claim(scenario.claim_name, e2e.namespace))
    await create_shapes(e2e, cells)
    queues: dict[str, str | None] = {}
    for b in baselines:
        baseline = BY_KEY[b]
        if baseline.queue == "none":
            queues[b] = None
            continue
        if baseline.queue == "builtin":
            checks = [await e2e.create_provisioning_check(f"p-{b}-{e2e.namespace}")]
        else:
            if not fitgate_check:
                raise ValueError("the fitgate baseline needs fitgate's AdmissionCheck name")
            checks = [fitgate_check]
        queues[b] = await e2e.create_queues(f"p-{b}-{e2e.namespace}", quota=dict(QUOTA),
                                            admission_checks=checks)
    await make_live_nodes(e2e, cells)

    async def one(cell: Cell) -> Cell:
        try:
            return await run_cell(e2e, cell, queues[cell.baseline.key])
        except Exception as err:  # one broken cell must not hide the others' figures
            cell.error = f"{type(err).__name__}: {str(err)[:300]}"
            return cell
    try:
        return list(await asyncio.gather(*(one(c) for c in cells)))
    finally:
        # Pending pods would keep asking the autoscaler for nodes after the run.
        for cell in cells:
            await e2e.kube.delete("batch/v1", "Job", prefix(cell.scenario, cell.baseline),
                                  e2e.namespace)


def table(cells: list[Cell]) -> str:
    return figures.table([c.row() for c in cells])
