"""`fitgate serve`'s inventory at scale: memory, per-event update time, event to decision.

    .venv/bin/python -m bench.serve [--nodes 5000] [--events 20000] [--seed 7]

A seeded generator makes a realistic cluster as the watch caches would hold it: Nodes with
their full status (conditions, addresses, nodeInfo, images), mixed node types (8-GPU nodes
with a NIC per PCIe root, 4-GPU nodes, 1-GPU nodes, CPU-only nodes), ResourceSlices whose
devices carry unique attributes (uuid, pciBusID, serial) besides the shared ones
(productName, driverVersion, pcieRoot, memory), ResourceClaims allocating a varied part
of the GPUs, and Pods (DaemonSet pods on every node, workload pods on most), all as plain
dicts in `Store`s with the `ClusterInventory` subscribed, as in the service (no API
server: the informers' stores are filled directly). The inventory runs without its
background thread here, so that the engine's work is timed on this thread: each event is
`Store.apply` (the event loop's part: the store, and queueing the event for the engine)
then `ClusterInventory.sync` (the decision thread's part: `fitcore.inventory.Inventory
.apply` of the event).

Figures:
- resident memory (RSS) of the process with everything cached and applied;
- per-event inventory update time, per event kind, over a seeded mix of events: Node
  heartbeats, Pod status updates, Pods bound and finished, claims allocated and
  released, slices republished; the loop's part and the engine's part;
- event to decision: one claim allocated, then `ClusterInventory.fit` of an 8-pod gang
  (which applies the event, then decides), after a warm-up decision of the same gang;
- the webhook's decision process (`ProcessDecider`, which `fitgate serve` starts beside
  the inventory; its own inventory of the idle cluster) once it has answered a question:
  its RSS, and the two processes' sum against the chart's container memory limit
  (`resources.limits.memory` in charts/fitgate/values.yaml).
Targets: RSS ≤ 500 MB, ≤ 100 µs per event; the ratio to each target is printed.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import copy
import gc
import pathlib
import random
import statistics
import time
import uuid
from typing import Any

import yaml

from admission.engine import inventory
from admission.kube import client, kinds, store
from admission.policy import fitpolicy as policy
from admission.webhook import decider
from fitcore import (
    _alloc,  # noqa: F401  (fail loudly when the extension is not built)
    values,
    workload,
)
from tests.fitcore import builders as b
from tests.gang import builders as gb

RSS_TARGET_MB = 500.0
EVENT_TARGET_US = 100.0
ROOT = "resource.kubernetes.io/pcieRoot"
TYPES = (  # (name, share of nodes, GPUs, PCIe roots, NICs)
    ("h100x8", 0.45, 8, 2, True), ("a100x4", 0.25, 4, 1, True), ("l4x1", 0.15, 1, 1, False),
    ("cpu", 0.15, 0, 0, False))


def _rng_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def node_obj(rng: random.Random, name: str, kind: str, zone: str, rack: str) -> dict[str, Any]:
    images = [{"names": [f"registry.example.com/team/image-{rng.randrange(10**6)}@sha256:"
                         + f"{rng.getrandbits(256):064x}"], "sizeBytes": rng.randrange(10**9)}
              for _ in range(8)]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": _rng_uuid(rng), "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "node.kubernetes.io/instance-type": kind,
                                "topology.kubernetes.io/zone": zone, gb.RACK: rack},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": f"10.{rng.randrange(256)}.{rng.randrange(256)}.0/24",
                 "providerID": f"cloud://{zone}/{name}"},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1000Gi", "pods": "110",
                            "ephemeral-storage": "900Gi"},
            "capacity": {"cpu": "96", "memory": "1008Gi", "pods": "110"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                            "lastHeartbeatTime": "2026-12-03T07:00:00Z",
                            "lastTransitionTime": "2026-12-01T00:00:00Z",
                            "reason": f"Kubelet{t}", "message": f"kubelet reports {t}"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure",
                                     "Ready")],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{rng.randrange(256)}."
                                                            f"{rng.randrange(256)}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": f"{rng.getrandbits(128):032x}",
                         "systemUUID": _rng_uuid(rng), "bootID": _rng_uuid(rng),
                         "kernelVersion": "6.8.0-1015", "osImage": "Ubuntu 24.04",
                         "containerRuntimeVersion": "containerd://2.0.1",
                         "kubeletVersion": "v1.36.0", "operatingSystem": "linux",
                         "architecture": "amd64"},
            "images": images}}


def gpu_slice(rng: random.Random, node: str, gpus: int, roots: int) -> dict[str, Any]:
    per_root = max(1, gpus // roots)
    devices = []
    for i in range(gpus):
        devices.append({"name": f"gpu-{i}", "attributes": {
            "index": {"int": i}, "uuid": {"string": "GPU-" + _rng_uuid(rng)},
            "pciBusID": {"string": f"0000:{rng.randrange(256):02x}:00.0"},
            "serial": {"string": str(rng.randrange(10**12))},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "driverVersion": {"version": "570.86.15"},
            ROOT: {"string": f"pci{i // per_root}"}},
            "capacity": {"memory": {"value": "80Gi"}}})
    out = b.rslice(f"{node}-gpu", devices, node=node, pool=f"{node}-gpu")
    out["metadata"]["resourceVersion"] = "1"
    return out


def nic_slice(rng: random.Random, node: str, roots: int) -> dict[str, Any]:
    devices = [{"name": f"nic-{r}", "attributes": {
        "macAddress": {"string": ":".join(f"{rng.randrange(256):02x}" for _ in range(6))},
        "pciBusID": {"string": f"0000:{rng.randrange(256):02x}:00.1"},
        ROOT: {"string": f"pci{r}"}}} for r in range(roots)]
    out = b.rslice(f"{node}-nic", devices, node=node, driver=b.NIC, pool=f"{node}-nic")
    out["metadata"]["resourceVersion"] = "1"
    return out


def pod_obj(rng: random.Random, name: str, ns: str, node: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": _rng_uuid(rng),
                     "resourceVersion": "1", "labels": {"app": name.rsplit("-", 1)[0]},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": name.rsplit("-", 1)[0],
                                          "uid": _rng_uuid(rng)}]},
        "spec": {"nodeName": node, "containers": [
            {"name": "main", "image": "registry.example.com/app:1.0",
             "resources": {"requests": {"cpu": cpu, "memory": "2Gi"}},
             "env": [{"name": "MODE", "value": "prod"}]}]},
        "status": {"phase": "Running", "podIP": f"10.1.{rng.randrange(256)}."
                                                f"{rng.randrange(256)}",
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def claim_obj(name: str, ns: str, node: str, devices: list[str]) -> dict[str, Any]:
    out = b.allocated(name, *[(b.GPU, f"{node}-gpu", d) for d in devices])
    out["metadata"].update(namespace=ns, resourceVersion="1")
    return out


class Cluster:
    def __init__(self, nodes: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.stores = {k.kind: store.Store(k) for k in inventory.WATCHED}
        self.gpu_nodes: list[tuple[str, int]] = []
        self.pods: list[tuple[str, str]] = []
        self.claims: list[tuple[str, str]] = []
        self.rv = 1
        self.n = nodes
        self.applied = 0.0  # seconds in Store.apply (store + queueing for the engine)
        self.engine = 0.0  # seconds in ClusterInventory.sync (the engine's apply)
        self.cpu = 0.0  # process CPU seconds of both (steadier on a busy machine)
        self.inv: inventory.ClusterInventory | None = None

    def store_of(self, kind: kinds.Kind) -> store.Store:
        return self.stores[kind.kind]

    def add(self, kind: kinds.Kind, obj: dict[str, Any], event: str = "ADDED") -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        ev = client.WatchEvent(event, obj)  # type: ignore[arg-type]
        c0, t0 = time.process_time(), time.perf_counter()
        self.stores[kind.kind].apply(ev)
        t1 = time.perf_counter()
        if self.inv is not None:
            self.inv.sync()
        self.applied += t1 - t0
        self.engine += time.perf_counter() - t1
        self.cpu += time.process_time() - c0

    def populate(self) -> None:
        rng = self.rng
        for o in gb.classes():
            self.add(kinds.DEVICE_CLASS, o)
        weights = [t[1] for t in TYPES]
        for i in range(self.n):
            kind, _, gpus, roots, nics = rng.choices(TYPES, weights)[0]
            name = f"node-{i:05d}"
            self.add(kinds.NODE, node_obj(rng, name, kind, f"zone-{i % 3}",
                                          f"rack-{i // 40:03d}"))
            for d in range(3):  # DaemonSet pods
                self.pod(f"ds{d}-{name}", "kube-system", name, "100m")
            for p in range(rng.randrange(0, 5)):
                self.pod(f"app{p}-{name}", f"team-{rng.randrange(20)}", name, "4")
            if gpus:
                self.add(kinds.RESOURCE_SLICE, gpu_slice(rng, name, gpus, roots))
                if nics:
                    self.add(kinds.RESOURCE_SLICE, nic_slice(rng, name, roots))
                self.gpu_nodes.append((name, gpus))
                used = rng.randrange(0, gpus + 1)  # varied allocations
                if used:
                    self.claim(name, used)

    def pod(self, name: str, ns: str, node: str, cpu: str) -> None:
        self.add(kinds.POD, pod_obj(self.rng, name, ns, node, cpu))
        self.pods.append((ns, name))

    def claim(self, node: str, count: int) -> None:
        ns, name = f"team-{self.rng.randrange(20)}", f"claim-{len(self.claims)}"
        gpus = next(g for n, g in self.gpu_nodes if n == node)
        devices = self.rng.sample([f"gpu-{d}" for d in range(gpus)], count)
        self.add(kinds.RESOURCE_CLAIM, claim_obj(name, ns, node, devices))
        self.claims.append((ns, name))

    # ---------------------------------------------------------------- events

    def event(self, kind: str) -> None:
        rng = self.rng
        if kind == "node-heartbeat":
            n = self.stores["Node"].get(f"node-{rng.randrange(self.n):05d}")
            assert n is not None
            new = {**n, "status": {**n["status"], "conditions": [
                {**c, "lastHeartbeatTime": f"2026-12-03T08:{rng.randrange(60):02d}:00Z"}
                for c in n["status"]["conditions"]]}, "metadata": dict(n["metadata"])}
            self.add(kinds.NODE, new, "MODIFIED")
        elif kind == "pod-status":
            ns, name = self.pods[rng.randrange(len(self.pods))]
            p = self.stores["Pod"].get(name, ns)
            if p is None:
                return
            new = {**p, "metadata": dict(p["metadata"]),
                   "status": {**p["status"], "conditions": [{"type": "Ready",
                                                             "status": rng.choice(
                                                                 ["True", "False"])}]}}
            self.add(kinds.POD, new, "MODIFIED")
        elif kind == "pod-bound":
            node = f"node-{rng.randrange(self.n):05d}"
            self.pod(f"job-{len(self.pods)}", "team-x", node, "2")
        elif kind == "pod-finished":
            ns, name = self.pods[rng.randrange(len(self.pods))]
            p = self.stores["Pod"].get(name, ns)
            if p is None or p["status"]["phase"] != "Running":
                return
            new = {**p, "metadata": dict(p["metadata"]),
                   "status": {**p["status"], "phase": "Succeeded"}}
            self.add(kinds.POD, new, "MODIFIED")
        elif kind == "claim-allocated":
            node, gpus = self.gpu_nodes[rng.randrange(len(self.gpu_nodes))]
            self.claim(node, rng.randrange(1, gpus + 1))
        elif kind == "claim-released":
            ns, name = self.claims[rng.randrange(len(self.claims))]
            c = self.stores["ResourceClaim"].get(name, ns)
            if c is not None:
                self.add(kinds.RESOURCE_CLAIM, copy.copy(c), "DELETED")
        elif kind == "slice-republished":
            node, gpus = self.gpu_nodes[rng.randrange(len(self.gpu_nodes))]
            s = self.stores["ResourceSlice"].get(f"{node}-gpu")
            assert s is not None
            new = copy.deepcopy(s)
            new["spec"]["pool"]["generation"] = new["spec"]["pool"].get("generation", 0) + 1
            self.add(kinds.RESOURCE_SLICE, new, "MODIFIED")


MIX = (("node-heartbeat", 30), ("pod-status", 40), ("pod-bound", 8), ("pod-finished", 8),
       ("claim-allocated", 6), ("claim-released", 6), ("slice-republished", 2))


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def chart_memory_limit_mb() -> float:
    """The fitgate container's memory limit in the chart's default values, in MB."""
    with open(pathlib.Path(__file__).parent.parent / "charts/fitgate/values.yaml") as f:
        limit = yaml.safe_load(f)["resources"]["limits"]["memory"]
    return float(values.Quantity.parse(str(limit)).value) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    base = rss_mb()
    cluster = Cluster(args.nodes, args.seed)
    started = time.perf_counter()
    inv = inventory.ClusterInventory(cluster.store_of, background=False)
    cluster.populate()
    queued_s = time.perf_counter() - started
    started = time.perf_counter()
    inv.sync()
    applied_s = time.perf_counter() - started
    cluster.inv = inv
    gc.collect()
    rss = rss_mb()
    gc.freeze()  # the cached cluster is long-lived, as in the service
    counts = {k: len(s) for k, s in cluster.stores.items()}
    print(f"cluster: {args.nodes} nodes ({', '.join(f'{k} {v}' for k, v in counts.items())}),"
          f" {sum(len(d['spec']['devices']) for d in cluster.stores['ResourceSlice'].list())}"
          " devices")
    print(f"initial load: {queued_s:.2f} s into the stores (queued for the engine), "
          f"{applied_s:.2f} s applied by the engine; problems: {len(inv.problems())}")
    print(f"resident memory: {rss:.0f} MB (process before the cluster: {base:.0f} MB); "
          f"target {RSS_TARGET_MB:.0f} MB: ratio {rss / RSS_TARGET_MB:.2f}")

    # Per-event update time.
    rng = random.Random(args.seed + 1)
    names, weights = zip(*MIX, strict=True)
    per: dict[str, list[float]] = {n: [] for n in names}
    loop_part: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.events):
        kind = rng.choices(names, weights)[0]
        cluster.applied = cluster.engine = cluster.cpu = 0.0
        cluster.event(kind)
        if cluster.applied:
            per[kind].append(cluster.applied + cluster.engine)
            loop_part[kind].append(cluster.applied)
            cpu[kind].append(cluster.cpu)
    all_times = [t for ts in per.values() for t in ts]
    print(f"\nper-event update time over {len(all_times)} events (µs of wall time; total ="
          " the loop's part + the engine's apply; and the mean of process CPU time):")
    print(f"{'event':<20}{'count':>7}{'median':>9}{'p99':>9}{'mean':>9}{'loop mean':>11}"
          f"{'cpu mean':>10}")

    def p99(ts: list[float]) -> float:
        return sorted(ts)[max(0, int(len(ts) * 0.99) - 1)]
    for kind in names:
        ts = per[kind]
        if ts:
            print(f"{kind:<20}{len(ts):>7}{statistics.median(ts) * 1e6:>9.1f}"
                  f"{p99(ts) * 1e6:>9.1f}{statistics.mean(ts) * 1e6:>9.1f}"
                  f"{statistics.mean(loop_part[kind]) * 1e6:>11.1f}"
                  f"{statistics.mean(cpu[kind]) * 1e6:>10.1f}")
    mean_us = statistics.mean(all_times) * 1e6
    loop_all = [t for ts in loop_part.values() for t in ts]
    cpu_us = statistics.mean([t for ts in cpu.values() for t in ts]) * 1e6
    print(f"{'all':<20}{len(all_times):>7}{statistics.median(all_times) * 1e6:>9.1f}"
          f"{p99(all_times) * 1e6:>9.1f}{mean_us:>9.1f}"
          f"{statistics.mean(loop_all) * 1e6:>11.1f}{cpu_us:>10.1f}")
    print(f"target {EVENT_TARGET_US:.0f} µs per event: ratio (mean wall) "
          f"{mean_us / EVENT_TARGET_US:.2f}, (mean CPU) {cpu_us / EVENT_TARGET_US:.2f}")
    print(f"resident memory after the events: {rss_mb():.0f} MB")

    # Event to decision.
    wl = gb.workload(gb.pod_set(count=8, cpu="8", templates=("gpus",)))
    cluster.add(kinds.RESOURCE_CLAIM_TEMPLATE, gb.template("gpus", gpus=4))
    g = workload.workload(wl, inv.references())
    started = time.perf_counter()
    inv.fit(g)  # warm: this gang's kept work, after the event mix
    warm = time.perf_counter() - started
    cluster.inv = None  # the decision applies the event itself
    rows = []
    for _ in range(9):
        cluster.applied = 0.0
        cluster.event("claim-allocated")
        t0 = time.perf_counter()
        result = inv.fit(g)
        rows.append((cluster.applied, time.perf_counter() - t0))
    med = [statistics.median(r[i] for r in rows) * 1e3 for i in range(2)]
    print(f"\nevent to decision (claim allocated → 8-pod gang fit, median of {len(rows)}): "
          f"event {med[0]:.3f} ms + apply and decide {med[1]:.1f} ms = "
          f"{med[0] + med[1]:.1f} ms (verdict {result.verdict}; first decision of the gang "
          f"{warm * 1e3:.0f} ms)")
    print(f"resident memory after the decisions (fitcore's caches included): "
          f"{rss_mb():.0f} MB")

    # The webhook's decision process, as `fitgate serve` runs it beside the inventory.
    every_node = policy.scope([], [], namespace="default")
    process = decider.ProcessDecider({k: cluster.store_of(k) for k in inventory.WATCHED},
                                     timeout=600.0)
    try:
        started = time.perf_counter()
        verdict = process.submit(wl, g, every_node).result(600)
        first_s = time.perf_counter() - started
        gc.collect()
        parent, child = rss_mb(), rss_mb(process._proc.pid)
        limit = chart_memory_limit_mb()
        print(f"\nwebhook decision process: loaded and first verdict in {first_s:.1f} s "
              f"(refuse={verdict.refuse}); resident memory {child:.0f} MB; with this "
              f"process {parent + child:.0f} MB against the chart's limit {limit:.0f} MB: "
              f"ratio {(parent + child) / limit:.2f}")
    finally:
        process.close()


if __name__ == "__main__":
    main()
