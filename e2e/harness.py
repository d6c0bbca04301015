"""What an e2e test works with: node pools of a shape, Jobs, Workloads, and waiting.

A ``Harness`` is bound to one test: its namespace, and the cluster-scoped objects it
created (nodes, queues), which it deletes at the end of the test. Node pools are kwok
nodes labelled with a shape; the fake DRA driver publishes that shape's ResourceSlices
for them (after the shape's delay, or the shape's faulty devices for faulty nodes).

After every test (``cleanup``) the harness also undoes what cluster-autoscaler did for
it: once the test's ProvisioningRequests and pods are gone, it deletes the nodes the
autoscaler added to its node groups and waits (bounded) until the autoscaler reports
every group back at its minimum size, so no test inherits another's nodes.

``start_process`` runs a local process (``fitgate serve`` ...) tied to the test
(``runner.LocalProcess``); ``cluster`` is the ``LocalCluster`` (None on an external
cluster) with ``token_for`` and the fault methods.
"""

from __future__ import annotations

import contextlib
import pathlib
import ssl
from typing import Any

import yaml

from e2e import builders, dra_driver, kube, runner
from e2e.cluster.local import cluster

SYSTEM_NAMESPACE = cluster.SYSTEM_NAMESPACE
DEFAULT_TIMEOUT_S = 60.0
CLEANUP_TIMEOUT_S = 60.0
# Taints the node lifecycle controller keeps on a node until it is Ready and reachable.
_LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
AUTOSCALER_STATUS = "cluster-autoscaler-status"
# The node group cluster-autoscaler may grow in tests (kwok provider; see cluster.py).
# Its nodes carry the shape label "gpu-pool": 4 GPUs, 2 per PCIe root.
GPU_NODE_GROUP = cluster.NodeGroup(name="gpu-pool", shape="gpu-pool", max_size=8,
                                   devices=builders.gpu_devices(4, per_pcie_root=2))


class Harness:
    def __init__(self, client: kube.Kube, namespace: str,
                 system_namespace: str = SYSTEM_NAMESPACE,
                 local: cluster.LocalCluster | None = None,
                 node_groups: tuple[cluster.NodeGroup, ...] = (),
                 run_dir: pathlib.Path | None = None) -> None:
        self.kube = client
        self.namespace = namespace
        self.system_namespace = system_namespace
        self.cluster = local
        self.node_groups = node_groups or (local.node_groups if local else ())
        base = local.workdir if local else cluster.default_workdir()
        self.run_dir = run_dir or base / "tests" / namespace
        self.processes: list[runner.LocalProcess] = []
        self._cluster_objects: list[tuple[str, str, str]] = []  # apiVersion, kind, name

    wait_for = staticmethod(kube.wait_for)

    # -- shapes and node pools -----------------------------------------------------------

    async def define_shape(self, name: str, spec: dict[str, Any]) -> None:
        """Add or replace one shape in the driver's shapes ConfigMap (other shapes stay)."""
        data = {name: yaml.safe_dump(spec, sort_keys=False)}
        try:
            await self.kube.patch("v1", "ConfigMap", dra_driver.SHAPES_CONFIGMAP,
                                  {"data": data}, namespace=self.system_namespace)
        except kube.NotFound:
            await self.kube.create({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": dra_driver.SHAPES_CONFIGMAP,
                             "namespace": self.system_namespace},
                "data": data})

    async def create_node_pool(self, name: str, count: int, devices: list[dict[str, Any]],
                               labels: dict[str, str] | None = None,
                               allocatable: dict[str, str] | None = None,
                               delay_seconds: float = 0,
                               faulty_devices: list[dict[str, Any]] | None = None,
                               faulty_nodes: str = "annotated",
                               wait: bool = True,
                               timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
        """``count`` kwok nodes ``<name>-<i>`` of a shape named ``name``.

        ``devices`` is what every node's ResourceSlice holds (ResourceSlice v1 device
        dicts, e.g. ``builders.gpu_devices()``). With ``wait``, returns once the nodes are
        Ready and (unless a delay or fault was asked for) have published their slices.
        """
        await self.define_shape(name, builders.shape(devices, delay_seconds, faulty_devices,
                                                     faulty_nodes))
        names = [f"{name}-{i}" for i in range(count)]
        for node in names:
            await self.kube.create(builders.kwok_node(node, name, labels, allocatable))
            self._cluster_objects.append(("v1", "Node", node))
        if wait:
            await self.wait_nodes_ready(names, timeout)
            if delay_seconds == 0:
                await self.wait_slices(names, timeout)
        return names

    async def wait_nodes_ready(self, names: list[str], timeout: float = DEFAULT_TIMEOUT_S
                               ) -> None:
        async def ready() -> bool:
            for name in names:
                node = await self.kube.get("v1", "Node", name)
                if node is None or not kube.has_condition(node, "Ready"):
                    return False
                # The node lifecycle controller takes its not-ready taint off a moment
                # after Ready turns True; until then the scheduler (and fitgate) skip it.
                if any((t or {}).get("key") in _LIFECYCLE_TAINTS
                       for t in (node.get("spec") or {}).get("taints") or ()):
                    return False
            return True
        await kube.wait_for(ready, timeout, f"nodes {names} Ready and untainted")

    async def slices_of(self, node: str) -> list[dict[str, Any]]:
        return await self.kube.list("resource.k8s.io/v1", "ResourceSlice",
                                    field_selector=f"spec.nodeName={node}")

    async def wait_slices(self, names: list[str], timeout: float = DEFAULT_TIMEOUT_S
                          ) -> dict[str, list[dict[str, Any]]]:
        """Wait until every node has at least one ResourceSlice; return them by node."""
        async def published() -> dict[str, list[dict[str, Any]]] | None:
            out = {n: await self.slices_of(n) for n in names}
            return out if all(out.values()) else None
        return await kube.wait_for(published, timeout, f"ResourceSlices of {names}")

    # -- Kueue -----------------------------------------------------------------------------

    async def create_queues(self, name: str, quota: dict[str, str] | None = None,
                            admission_checks: list[str] | None = None,
                            flavor: str = "default") -> str:
        """A ResourceFlavor (shared), a ClusterQueue ``name`` and a LocalQueue ``name`` in
        this test's namespace; returns the LocalQueue's name."""
        await self.kube.apply(builders.resource_flavor(flavor))
        await self.kube.apply(builders.cluster_queue(name, flavor, quota, admission_checks))
        self._cluster_objects.append((builders.KUEUE, "ClusterQueue", name))
        await self.kube.apply(builders.local_queue(name, self.namespace, name))

        async def active() -> bool:
            cq = await self.kube.get(builders.KUEUE, "ClusterQueue", name)
            return kube.has_condition(cq, "Active")
        await kube.wait_for(active, DEFAULT_TIMEOUT_S, f"ClusterQueue {name} Active")
        return name

    async def create_provisioning_check(self, name: str,
                                        provisioning_class: str = builders.BEST_EFFORT_ATOMIC
                                        ) -> str:
        """Kueue's built-in ProvisioningRequest AdmissionCheck (and its config), Active."""
        await self.kube.apply(builders.provisioning_request_config(name, provisioning_class))
        self._cluster_objects.append((builders.KUEUE, "ProvisioningRequestConfig", name))
        await self.kube.apply(builders.admission_check(
            name, builders.PROVISIONING_CONTROLLER,
            {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": name}))
        self._cluster_objects.append((builders.KUEUE, "AdmissionCheck", name))

        async def active() -> bool:
            ac = await self.kube.get(builders.KUEUE, "AdmissionCheck", name)
            return kube.has_condition(ac, "Active")
        await kube.wait_for(active, DEFAULT_TIMEOUT_S, f"AdmissionCheck {name} Active")
        return name

    async def create_job(self, name: str, queue: str | None, parallelism: int = 1,
                         cpu: str = "1", claim_template_name: str | None = None,
                         node_selector: dict[str, str] | None = None) -> dict[str, Any]:
        return await self.kube.create(builders.job(name, self.namespace, queue, parallelism,
                                                   cpu, claim_template_name, node_selector))

    async def create_workload(self, name: str, queue: str, count: int = 1, cpu: str = "1",
                              claim_template_name: str | None = None) -> dict[str, Any]:
        return await self.kube.create(builders.kueue_workload(
            name, self.namespace, queue, count, cpu, claim_template_name))

    async def workload_of_job(self, job_name: str) -> dict[str, Any] | None:
        """The Kueue Workload Kueue created for a Job (owned by it), if any yet."""
        for wl in await self.kube.list(builders.KUEUE, "Workload", self.namespace):
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("name") == job_name:
                    return wl
        return None

    async def pods_of_job(self, job_name: str) -> list[dict[str, Any]]:
        return await self.kube.list("v1", "Pod", self.namespace,
                                    label_selector=f"batch.kubernetes.io/job-name={job_name}")

    async def running_pods(self, job_name: str, count: int, timeout: float = 90,
                           what: str = "") -> list[dict[str, Any]]:
        """Wait (bounded) until the Job has exactly ``count`` pods, all Running; return them."""
        async def running() -> list[dict[str, Any]] | None:
            pods = await self.pods_of_job(job_name)
            ok = len(pods) == count and all(p["status"].get("phase") == "Running"
                                            for p in pods)
            return pods if ok else None
        pods: list[dict[str, Any]] = await self.wait_for(
            running, timeout, what or f"{count} pods of {job_name} Running")
        return pods

    async def finish_pods(self, pods: list[dict[str, Any]]) -> None:
        """Ask kwok to complete these Running pods (they stay Running until then)."""
        for pod in pods:
            await self.kube.patch("v1", "Pod", pod["metadata"]["name"], {
                "metadata": {"annotations": {cluster.POD_COMPLETE_ANNOTATION: "true"}}},
                namespace=self.namespace)

    # -- local processes --------------------------------------------------------------------

    async def start_process(self, name: str, argv: list[str],
                            env: dict[str, str] | None = None,
                            ready_url: str | None = None,
                            ready_context: ssl.SSLContext | None = None,
                            cwd: pathlib.Path | None = None,
                            timeout: float = runner.READY_TIMEOUT_S) -> runner.LocalProcess:
        """Start ``argv`` as a process of this test (stopped at its end; its log goes
        into the failure report). With ``ready_url``, returns once it answers 200."""
        if any(p.name == name for p in self.processes):
            raise ValueError(f"this test already has a process named {name!r}")
        proc = runner.LocalProcess(name, argv, self.run_dir, env, cwd, ready_url,
                                   ready_context)
        self.processes.append(proc)
        await proc.start(timeout)
        return proc

    # -- cleanup ---------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Undo the test: its processes, cluster objects, namespace and autoscaled nodes.

        Raises (after doing all it can) if the autoscaler's node groups do not come back
        to their minimum size in time: the next test would inherit nodes.
        """
        for proc in reversed(self.processes):
            await proc.stop()
        for api_version, kind, name in reversed(self._cluster_objects):
            with contextlib.suppress(Exception):
                await self.kube.delete(api_version, kind, name)
        self._cluster_objects.clear()
        with contextlib.suppress(kube.NotFound):
            await self.kube.delete("v1", "Namespace", self.namespace)
        if self.node_groups:
            await self.reset_node_groups()

    async def reset_node_groups(self, timeout: float = CLEANUP_TIMEOUT_S) -> None:
        """Delete the nodes cluster-autoscaler added to its node groups, once nothing of
        this test asks for them any more, and wait until it reports each group at its
        minimum size (the kwok provider counts a group's target from its nodes)."""
        async def nothing_pending() -> bool:
            prs = await self.kube.list(builders.AUTOSCALING, "ProvisioningRequest",
                                       self.namespace)
            pods = await self.kube.list("v1", "Pod", self.namespace)
            return not prs and not pods
        await kube.wait_for(nothing_pending, timeout,
                            f"ProvisioningRequests and pods of {self.namespace} deleted")
        names = {g.name for g in self.node_groups}
        labelled = await self.kube.list("v1", "Node", label_selector=cluster.NODEGROUP_LABEL)
        grown = [n for n in labelled
                 if n["metadata"]["labels"].get(cluster.NODEGROUP_LABEL) in names]
        before = await self.kube.get("v1", "ConfigMap", AUTOSCALER_STATUS,
                                     self.system_namespace)
        for node in grown:
            with contextlib.suppress(kube.NotFound):
                await self.kube.delete("v1", "Node", node["metadata"]["name"])
        if before is None or not grown:
            return  # no autoscaler here (external cluster), or it grew nothing

        async def at_min() -> bool:
            cm = await self.kube.get("v1", "ConfigMap", AUTOSCALER_STATUS,
                                     self.system_namespace)
            if cm is None or (cm["metadata"]["resourceVersion"]
                              == before["metadata"]["resourceVersion"]):
                return False  # no loop of the autoscaler since the nodes went
            status = yaml.safe_load((cm.get("data") or {}).get("status") or "{}") or {}
            groups = {g.get("name"): g.get("health") or {}
                      for g in status.get("nodeGroups") or []}
            return all(g.name in groups and groups[g.name].get("cloudProviderTarget")
                       == groups[g.name].get("minSize") for g in self.node_groups)
        await kube.wait_for(at_min, timeout,
                            f"cluster-autoscaler node groups {sorted(names)} at min size")
