"""Scenario 7, slow node: new nodes publish their ResourceSlices ``DELAY_S`` seconds after
they appear, side by side with Kueue's built-in ProvisioningRequest check.

A real node's DRA driver publishes its devices some time after the node registers (driver
pod start, device discovery). Here the fake driver waits ``DELAY_S`` (the shape's
``delaySeconds``) for the node groups the scenario uses, for the time of the scenario:

- built-in: scenario 1's ``s1-builtin-*`` groups. Kueue's check admits when the
  ProvisioningRequest is Provisioned, that is when the nodes exist; the pods are created
  then and stay Pending (quota held) until the devices are published.
- fitgate: the harness's ``gpu-pool`` group (4 GPUs, 2 per PCIe root) and its NodeShape.
  fitgate waits for the new nodes *and* their slices, verifies the gang on them, and only
  then admits.

The gang: one pod of 30 CPUs and 2 GPUs of one PCIe root. Measured per run: seconds from
submit to Admitted, to the slices published, to the pod Running; node-seconds provisioned
but unused (node created until the pod runs). A real autoscaler books the capacity for
10 minutes: a driver slower than that makes the built-in check's pods lose the booking
while fitgate has not admitted yet; the scenario keeps the delay short and shows the
order of events, which is the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from e2e import builders, harness, kube
from e2e.cluster.local import cluster
from e2e.scenarios import figures, more, topology

SCENARIO = "7 slow node"
DELAY_S = 20.0
CLAIM = "two-gpus-one-root"
CPU = "30"
TIMEOUT_S = 150.0
FITGATE_GROUP = harness.GPU_NODE_GROUP


@dataclasses.dataclass
class Run:
    check: str
    admitted: float | None       # seconds from submit
    slices: float | None         # seconds from submit until the new node's slice existed
    running: float | None
    node: str
    unused_node_seconds: float | None
    notes: list[str] = dataclasses.field(default_factory=list)

    def row(self) -> figures.Row:
        outcome = ("pod Running" if self.running is not None else
                   f"not running after {TIMEOUT_S:.0f} s")
        when = (f"admitted {self.admitted:.1f} s, slices {self.slices:.1f} s after submit"
                if self.admitted is not None and self.slices is not None else
                f"admitted {self.admitted}, slices {self.slices}")
        if self.admitted is not None and self.running is not None:
            when += f", pod Running {self.running - self.admitted:.1f} s after admission"
        return figures.Row(SCENARIO, self.check, outcome, self.running,
                           f"1 ({self.node})" if self.node else "0",
                           self.unused_node_seconds, "; ".join([when, *self.notes]))


def _ts(value: str | None) -> float | None:
    return topology._ts(value)


async def _slow(e2e: harness.Harness, groups: list[cluster.NodeGroup], delay: float) -> None:
    for g in groups:
        await e2e.define_shape(g.shape, builders.shape(list(g.devices or ()), delay))


async def _run(e2e: harness.Harness, check_label: str, job: str, queue: str,
               selector: dict[str, str], label_selector: str) -> Run:
    submitted = time.time()
    await e2e.create_job(job, queue, parallelism=1, cpu=CPU, claim_template_name=CLAIM,
                         node_selector=selector)

    async def running() -> dict[str, Any] | None:
        pods = await e2e.pods_of_job(job)
        ok = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return ok[0] if ok else None
    run = Run(check_label, None, None, None, "", None)
    try:
        pod = await e2e.wait_for(running, TIMEOUT_S, f"{check_label}: the pod Running")
        since = topology._pod_running_since(pod)
        run.running = (since or time.time()) - submitted
    except TimeoutError:
        pod = None
    wl = await e2e.workload_of_job(job)
    admitted = kube.condition(wl, "Admitted")
    if admitted and admitted.get("status") == "True":
        at = _ts(admitted.get("lastTransitionTime"))
        run.admitted = at - submitted if at is not None else None
    nodes = await e2e.kube.list("v1", "Node", label_selector=label_selector)
    if nodes:
        node = nodes[0]
        run.node = node["metadata"]["name"]
        slices = await e2e.slices_of(run.node)
        made = [_ts(s["metadata"]["creationTimestamp"]) for s in slices]
        if made and all(m is not None for m in made):
            run.slices = max(m for m in made if m is not None) - submitted
        created = _ts(node["metadata"]["creationTimestamp"])
        end = submitted + run.running if run.running is not None else time.time()
        if created is not None:
            run.unused_node_seconds = max(0.0, end - created)
        if len(nodes) > 1:
            run.notes.append(f"{len(nodes)} nodes")
    return run


async def run(e2e: harness.Harness, check: str) -> tuple[Run, Run]:
    """Both runs at once (their node groups and nodeSelectors differ)."""
    builtin_groups = [g for g in topology.NODE_GROUPS if g.name.startswith("s1-builtin")]
    groups = [*builtin_groups, FITGATE_GROUP]
    await e2e.kube.create(builders.claim_template(CLAIM, e2e.namespace, 2,
                                                  match_attribute=builders.PCIE_ROOT))
    await more.cluster_object(e2e, {
        "apiVersion": more.FITGATE_API, "kind": "NodeShape",
        "metadata": {"name": f"s7-{FITGATE_GROUP.name}"},
        "spec": {"nodeLabels": cluster.template_node(FITGATE_GROUP)["metadata"]["labels"],
                 "allocatable": dict(FITGATE_GROUP.allocatable),
                 "resourceSlices": [{"driver": cluster.DRIVER_NAME,
                                     "pool": {"name": "gpus", "resourceSliceCount": 1},
                                     "devices": list(FITGATE_GROUP.devices or ())}],
                 "price": "5", "provisioning": {"className": builders.BEST_EFFORT_ATOMIC},
                 "maxNodes": FITGATE_GROUP.max_size}})
    builtin_check = await e2e.create_provisioning_check(f"s7-prov-{e2e.namespace}")
    builtin_queue = await e2e.create_queues(f"s7-builtin-{e2e.namespace}",
                                            admission_checks=[builtin_check])
    fitgate_queue = await e2e.create_queues(f"s7-fitgate-{e2e.namespace}",
                                            admission_checks=[check])
    await _slow(e2e, groups, DELAY_S)
    try:
        builtin, fit = await asyncio.gather(
            _run(e2e, "built-in ProvisioningRequest", "slow-builtin", builtin_queue,
                 {topology.RUN_LABEL: "s1-builtin"}, f"{topology.RUN_LABEL}=s1-builtin"),
            _run(e2e, "fitgate", "slow-fitgate", fitgate_queue,
                 {cluster.NODEGROUP_LABEL: FITGATE_GROUP.name},
                 f"{cluster.NODEGROUP_LABEL}={FITGATE_GROUP.name}"))
    finally:
        await _slow(e2e, groups, 0)
    return builtin, fit
