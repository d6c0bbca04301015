"""Scenario 12 (issue #25): Kueue's topology-aware scheduling picks the wrong rack.

Two racks of two kwok nodes behind one TAS ResourceFlavor (a Topology with two levels, the
rack label and ``kubernetes.io/hostname``: Kueue honours a pod set's nodeSelector only when
the lowest level is the node, which steering needs):

- ``split``: 2 nodes of 12 CPUs, 8 GPUs split over two PCIe roots (4 + 4);
- ``whole``: 3 nodes of 12 CPUs, 8 GPUs on one PCIe root.

The gang: a Job of 2 pods, each 10 CPUs and 8 GPUs that share one PCIe root, required in
one rack (``kueue.x-k8s.io/podset-required-topology``). Kueue counts CPU and memory only:
``split`` holds exactly 2 such pods, ``whole`` 3 (one per node either way), and its
BestFit takes the tightest domain that holds the pod set, ``split``, where no node has 8
GPUs on one root. (One pod per node by CPU in both racks: within a rack Kueue assigns
nodes by CPU too, and two pods packed onto one node of 8 GPUs would be a second wrong
choice, which fitgate refuses but cannot steer: it pins domains, not nodes.) fitgate
says Retry (the gang fits existing nodes on ``whole``), records why on the Job and, once
Kueue has released the quota, adds ``rack: whole`` to the Workload's pod set nodeSelector;
Kueue's next reservation lands on ``whole``, fitgate says Ready, the pods run there. No
ProvisioningRequest is made.

Measured: seconds from submit to both pods Running, and how many quota reservations it
took (the check's ``retryCount`` + 1: Kueue increments it at every eviction).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from e2e import builders, harness
from e2e.scenarios import figures, more

SCENARIO = "12 TAS picks the wrong rack"
RACK_LABEL = more.RACK_LABEL
HOSTNAME = "kubernetes.io/hostname"
REQUIRED_TOPOLOGY = more.REQUIRED_TOPOLOGY
DOMAIN_ANNOTATION = "fitgate.io/topology-domain"
DISAGREEMENT_ANNOTATION = "fitgate.io/topology-disagreement"
GANG_PODS = 2
GANG_CPU = "10"
RUN_TIMEOUT_S = 180.0
# rack -> (nodes, CPUs per node, GPUs per PCIe root)
RACKS = {"split": (2, "12", 4), "whole": (3, "12", 8)}


@dataclasses.dataclass
class Result:
    gang: more.Gang
    nodes: dict[str, str]                    # node -> rack, of this scenario's nodes
    requests: list[dict[str, Any]]
    job: dict[str, Any]
    reservations: int | None                 # quota reservations it took
    retry_count: Any                         # the check's retryCount at the end

    def rack_of_pods(self) -> set[str]:
        return {self.nodes.get(n, "?") for n in self.gang.pods.values()}

    def row(self) -> figures.Row:
        g = self.gang
        outcome = (f"{len(g.pods)} pods Running on rack(s) {', '.join(sorted(self.rack_of_pods()))}"
                   if g.pods else f"not running after {RUN_TIMEOUT_S:.0f} s")
        return figures.Row(SCENARIO, "fitgate", outcome, g.seconds, "0", None,
                           f"{self.reservations} quota reservation(s) "
                           f"(check retryCount {self.retry_count}), "
                           f"{len(self.requests)} ProvisioningRequest(s)")


def rack(e2e: harness.Harness, name: str) -> str:
    return f"s12-{e2e.namespace[-8:]}-{name}"


async def run(e2e: harness.Harness, check: str) -> Result:
    run_id = f"s12-{e2e.namespace}"
    nodes: dict[str, str] = {}
    for name, (count, cpu, per_root) in RACKS.items():
        for node in await e2e.create_node_pool(
                rack(e2e, name), count, builders.gpu_devices(8, per_pcie_root=per_root),
                labels={more.RUN_LABEL: run_id, RACK_LABEL: rack(e2e, name)},
                allocatable={"cpu": cpu, "memory": "256Gi", "pods": "110"}):
            nodes[node] = name
    topo = f"s12-{e2e.namespace}"
    await more.cluster_object(e2e, {"apiVersion": builders.KUEUE, "kind": "Topology",
                                    "metadata": {"name": topo},
                                    "spec": {"levels": [{"nodeLabel": RACK_LABEL},
                                                        {"nodeLabel": HOSTNAME}]}})
    flavor = builders.resource_flavor(topo, {more.RUN_LABEL: run_id})
    flavor["spec"]["topologyName"] = topo
    await e2e.kube.create(more.claim_template("eight-gpus-one-root", e2e.namespace, 8,
                                              match_attribute=builders.PCIE_ROOT))
    queue = await more.queues(e2e, topo, flavor=flavor, check=check)
    body = more.job(e2e, "wrong-rack", queue, GANG_PODS, GANG_CPU, "eight-gpus-one-root",
                    {more.RUN_LABEL: run_id}, pod_annotations={REQUIRED_TOPOLOGY: RACK_LABEL})
    submitted = time.time()
    await e2e.kube.create(body)
    gang = await more.observe(e2e, "wrong-rack", check, submitted, GANG_PODS, RUN_TIMEOUT_S)
    job = await e2e.kube.get("batch/v1", "Job", "wrong-rack", e2e.namespace) or {}
    entry = more._check_entry(gang.workload, check)
    retries = entry.get("retryCount")
    requests = await e2e.kube.list(builders.AUTOSCALING, "ProvisioningRequest",
                                   e2e.namespace)
    wl_name = ((gang.workload or {}).get("metadata") or {}).get("name")
    reserved = [ev for ev in await e2e.kube.list("v1", "Event", e2e.namespace)
                if (ev.get("involvedObject") or {}).get("name") == wl_name
                and ev.get("reason") == "QuotaReserved"]
    # Kueue's QuotaReserved Events (each counted once, `count` for repeats), else the
    # check's retryCount + 1 (Kueue increments it at every eviction).
    counted = sum(int(ev.get("count") or 1) for ev in reserved)
    reservations = counted or ((int(retries) + 1) if isinstance(retries, int) else None)
    return Result(gang, nodes, requests, job, reservations, retries)


def disagreement(job: dict[str, Any]) -> dict[str, Any]:
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(DISAGREEMENT_ANNOTATION)
    return json.loads(raw) if isinstance(raw, str) else {}


def pods_ever_on(e2e_pods: list[dict[str, Any]], nodes: dict[str, str], name: str) -> list[str]:
    """The job's pods bound to or pinned to rack `name`."""
    out = []
    for p in e2e_pods:
        spec = p.get("spec") or {}
        node = spec.get("nodeName")
        selector = spec.get("nodeSelector") or {}
        if (node and nodes.get(node) == name) or selector.get(RACK_LABEL, "").endswith(
                f"-{name}"):
            out.append(p["metadata"]["name"])
    return out
