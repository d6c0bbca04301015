"""Decision throughput of the running service: the gate and the check under a burst.

    .venv/bin/python -m bench.controller [--nodes 1000,5000] [--workloads 1000]
                                          [--rate 200] [--profile PATH] [--slow]
                                          [--cycles] [--switch-interval SECONDS]
                                          [--webhook]

What runs is `fitgate serve`'s own wiring (`admission.app.serve.Service`) with the
components `admission/app/components.py` lists: the informers over every kind of
`cache.SERVE`, the live `ClusterInventory`, the process's idle engine, the reconcile
runtime, the gate controller and the Workload reconciler (with the AdmissionCheck and
release controllers beside them). Only the API client is fake: the project's
`admission.kube.fake.FakeClient`, which serves the informers' lists and watches. No
certificate directory is configured, so the webhook's server and its decision process
(a child process with its own idle inventory) are not started: the figures are of the
controllers' process alone. `--webhook` starts that decision process
(`admission.webhook.decider.ProcessDecider` over the service's stores, as `serve` does)
and asks it what the pod hook's validate-jobs review asks of every new Job (each
template once while warming up, then every Job of the burst, without waiting for the
answers): the table's RSS column then adds the child's peak (its `VmHWM`), so the RSS
target is of all of fitgate's processes.

The cluster: `tests/gang/realistic.py` (seed 1: racks of 40 nodes, H100 / A100 / MIG A30
by rack, two NIC layouts, unique device attributes, random devices and pods in use), the
two H100 NodeShapes of that module and a B200 shape that no existing node has.

The burst: `--workloads` Jobs, each with its Kueue Workload, created at once (in chunks
of 50, the arrival of each recorded). Each Workload is in the state both controllers
act on: its Job and it carry fitgate's admission gate (the gate decides), and Kueue has
reserved its quota with fitgate's AdmissionCheck Pending (the check decides). One pod set
of 1 to 64 pods (most small, a few large) claims devices from one of several
ResourceClaimTemplates: 8 H100 GPUs and the NIC of one PCIe root, 1 H100, 4 A100 and a NIC
on one root, two MIG slices of one A30. A fifth ask for B200 GPUs (only a NodeShape has
them: the check asks for nodes with a ProvisioningRequest), a tenth for 24 GPUs on one
PCIe root (no node or shape has that: the gate holds them, the check rejects them).
What this bench does in Kueue's and the scheduler's place: when the gate lifts its entry
from a Job, the Workload's copy of the annotation is lifted too (Kueue syncs it); when the
check stores a gang's placements, the gang's pods are bound where fitcore placed them
`BIND_AFTER_S` later (what ends the check's promise of those nodes to the gang; their
cpu and memory count, their device claims are not allocated).

Meanwhile a feeder applies node, slice, claim and pod changes to the fake API at
`--rate` events per second (bounded: the pods and claims it adds it removes again):
Node heartbeats, pods bound and finished, devices allocated and released, GPU slices
republished (a new pool generation). A ticker task measures the event loop's lag
(10 ms sleeps).

Figures (per cluster size): gang decisions per second over the burst (a Workload is
decided when both the gate and the check have written their decision: the gate lifts or
keeps its gate, the check writes Ready / Rejected / Retry or creates a
ProvisioningRequest), p50 / p99 from a Workload's arrival to its decision, the event
loop's worst and p99 lag, events applied to the caches per second, the process's peak
RSS (and the fake API server's share of it, measured while seeding, before the service
starts), the process's CPU seconds over the burst (per Workload decided: on a shared
machine, a figure its other load changes far less than the rates) and the machine's
load average at start and end. A burst not decided within
`--timeout` seconds is cut there: the table says how many were decided, and the rates
and percentiles are of those. Then each target of issue 23
item 2, met or missed. The CPU over the burst is also given per thread (the event loop,
each decision thread); with `--profile`, per part as well (`bench.cpusplit`: engine
decisions, each reconciler's own Python, event application, the fake API server and
this bench, the loop, garbage collection). Figures, not assertions;
`tests/bench/test_controller.py` runs the same machinery small and checks every
decision.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import datetime
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from admission import config
from admission import constants as c
from admission.app import components, serve
from admission.app import logging as flog
from admission.check import ledger
from admission.gate import predicates as gating
from admission.kube import client, fake, kinds
from admission.policy import fitpolicy
from bench import cpusplit, loopwatch
from tests.gang import realistic as rl

SEED = 1
NAMESPACE = "team"
CHECK = "fitgate"
B200_LABEL = "fitgate.io/shape"
#: Seconds from the check's placements to the gang's pods bound (Kueue admitting, the job
#: controller creating pods, the release controller and the scheduler binding them).
BIND_AFTER_S = 2.0
#: The Kubernetes minor version the service follows (the fake API server reports none).
KUBE_VERSION = "1.36"

#: Targets of issue 23 item 2.
DECISIONS_TARGET = 200.0  # per second, at 5,000 nodes
P99_TARGET_S = 1.0  # arrival to decision, at 5,000 nodes
LAG_P99_TARGET_MS = 20.0  # at 5,000 nodes
RSS_TARGET_MIB = 1024.0  # all processes, at 10,000 nodes

#: The GIL switch interval in seconds (None: serve's configured one; `--switch-interval`).
SWITCH_INTERVAL: float | None = None

#: Gang sizes, most small (as real queues are), a few up to 64 pods.
POD_COUNTS = (1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 32, 64)


def templates() -> dict[str, dict[str, Any]]:
    """The ResourceClaimTemplates the Workloads use, by name."""
    out = {
        "h100-root": rl.template("h100-root"),
        "h100-one": rl.template("h100-one", gpus=1, nic=False),
        "a100-root": rl.template("a100-root", model="A100", gpus=4),
        "a30-slices": rl.mig_template("a30-slices"),
        "b200-root": rl.template("b200-root", model="B200"),
        "h100-24": rl.template("h100-24", gpus=24, nic=False),
    }
    return out


FITTING = ("h100-root", "h100-one", "a100-root", "a30-slices")


def b200_shape() -> dict[str, Any]:
    """The rail-aligned H100 shape with B200 GPUs (16 on two roots, a NIC on each); no
    existing node has them."""
    shape = copy.deepcopy(rl.shapes()[1])
    shape["metadata"]["name"] = "b200-rail"
    spec = shape["spec"]
    spec["nodeLabels"] = {rl.PRODUCT: "B200", B200_LABEL: "b200-rail"}
    spec["price"] = "20"
    for d in spec["resourceSlices"][0]["devices"]:
        d["attributes"]["productName"] = {"string": "B200"}
    return shape


@dataclasses.dataclass(frozen=True)
class Gang:
    """One Workload of the burst and the decision it should get."""

    name: str
    pods: int
    template: str
    expect: str  # "fits", "needs-nodes" or "impossible"


def burst(count: int, *, max_pods: int = 64, seed: int = SEED) -> list[Gang]:
    """`count` gangs: every tenth impossible, a fifth needing new nodes, the rest of
    several templates; pod counts from POD_COUNTS (at most `max_pods`)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        pods = min(max_pods, rng.choice(POD_COUNTS))
        if i % 10 == 9:
            kind, template = "impossible", "h100-24"
        elif i % 5 == 0:
            kind, template = "needs-nodes", "b200-root"
        else:
            kind, template = "fits", FITTING[rng.randrange(len(FITTING))]
        out.append(Gang(f"job-{i:05d}", pods, template, kind))
    return out


def job(g: Gang) -> dict[str, Any]:
    """The batch/v1 Job, suspended and gated as the webhook leaves it."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": g.name, "namespace": NAMESPACE,
                         "labels": {"kueue.x-k8s.io/queue-name": "q"},
                         "annotations": {gating.GATED_BY: gating.GATE}},
            "spec": {"suspend": True, "parallelism": g.pods, "completions": g.pods}}


def workload(g: Gang, job_uid: str) -> dict[str, Any]:
    """Kueue's Workload of the Job: gated by fitgate (copied from the Job), quota
    reserved, fitgate's check Pending."""
    wl = rl.workload(g.pods, template_name=g.template, name=g.name)
    wl["metadata"].update(
        annotations={gating.GATED_BY: gating.GATE},
        ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": g.name,
                          "uid": job_uid, "controller": True}])
    at = "2026-01-01T00:00:00Z"
    wl["status"] = {
        "conditions": [{"type": c.QUOTA_RESERVED, "status": "True", "reason": "QuotaReserved",
                        "message": "", "lastTransitionTime": at}],
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "workers", "flavors": {"cpu": "default"}, "count": g.pods}]},
        "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "",
                             "lastTransitionTime": at}]}
    return wl


def kueue_objects() -> list[dict[str, Any]]:
    v = "kueue.x-k8s.io/v1beta2"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": v, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
         "spec": {"controllerName": c.CONTROLLER_NAME},
         "status": {"conditions": [{"type": "Active", "status": "True"}]}},
        {"apiVersion": v, "kind": "ResourceFlavor", "metadata": {"name": "default"},
         "spec": {}},
        {"apiVersion": v, "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]}}},
        {"apiVersion": v, "kind": "LocalQueue", "metadata": {"name": "q", "namespace": NAMESPACE},
         "spec": {"clusterQueue": "cq"}},
    ]


# ----------------------------------------------------------------- the API, timed


@dataclasses.dataclass
class Decision:
    kind: str  # gate: "ungated" / "held"; check: "Ready", "Rejected", "Retry", "provisioning"
    at: float  # perf_counter seconds


class TimedClient(fake.FakeClient):
    """The project's FakeClient, recording when each Workload got each controller's
    first decision, and doing Kueue's part of lifting the gate (see the module
    docstring)."""

    def __init__(self) -> None:
        super().__init__(history=2_000)
        now = datetime.datetime.now(datetime.UTC)
        self.creation_time = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.arrived: dict[str, float] = {}
        self.gate: dict[str, Decision] = {}
        self.check: dict[str, Decision] = {}

    def _store(self, kind: kinds.Kind, obj: client.Obj, event: str) -> client.Obj:
        # Stamped as the API server stamps it: the time of its creation (the fake's one
        # fixed time would make every node look created after every ProvisioningRequest,
        # which the check's ledger then scans as that request's candidate new nodes).
        self.creation_time = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return super()._store(kind, obj, event)

    def _decided(self, into: dict[str, Decision], key: str, kind: str) -> None:
        if key in self.arrived and key not in into:
            into[key] = Decision(kind, time.perf_counter())

    async def apply(self, kind: kinds.Kind, obj: Mapping[str, Any], *, field_manager: str,
                    subresource: str | None = None, force: bool = False) -> client.Obj:
        out = await super().apply(kind, obj, field_manager=field_manager,
                                  subresource=subresource, force=force)
        if kind == kinds.WORKLOAD and subresource == "status":
            for e in (obj.get("status") or {}).get("admissionChecks") or []:
                if e.get("name") == CHECK and e.get("state") != "Pending":
                    self._decided(self.check, _key(obj), str(e["state"]))
        return out

    async def create(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> client.Obj:
        out = await super().create(kind, obj)
        if kind == kinds.CONFIG_MAP and out["metadata"]["name"].startswith(
                c.PLACEMENTS_PREFIX):
            asyncio.get_running_loop().call_later(BIND_AFTER_S, self._bind, out)
        if kind == kinds.PROVISIONING_REQUEST:
            owner = ledger.workload_of_request(out)
            if owner:
                self._decided(self.check, f"{owner[0]}/{owner[1]}", "provisioning")
        return out

    async def patch(self, kind: kinds.Kind, name: str, patch: Any, *,
                    namespace: str | None = None, patch_type: client.PatchType = "merge",
                    subresource: str | None = None) -> client.Obj:
        out = await super().patch(kind, name, patch, namespace=namespace,
                                  patch_type=patch_type, subresource=subresource)
        if kind == kinds.CONFIG_MAP and name.startswith(c.PLACEMENTS_PREFIX):
            asyncio.get_running_loop().call_later(BIND_AFTER_S, self._bind, out)
        if kind == kinds.JOB:
            key = f"{namespace}/{name}"
            annotations = gating.annotations_of(out)
            if gating.GATE not in gating.gates(annotations.get(gating.GATED_BY)):
                self._decided(self.gate, key, "ungated")
                self._kueue_lifts_gate(name, namespace or "")
            elif gating.EXPLANATION in annotations:
                self._decided(self.gate, key, "held")
        return out

    def _bind(self, placements: client.Obj) -> None:
        """Kueue admits, the job's pods are created and the scheduler binds each where
        fitcore placed it, labelled with the Workload's uid (what ends the check's
        promise of those nodes). Their cpu and memory count; their claims are not
        allocated here (the devices stay free in the inventory)."""
        meta = placements["metadata"]
        uid = meta["labels"][c.WORKLOAD_UID_LABEL]
        workload_name = meta["annotations"][c.WORKLOAD_ANNOTATION].split("/", 1)[1]
        for p in json.loads(placements["data"][c.PLACEMENTS_KEY]):
            pod = rl._pod(f"{workload_name}-{p['podSet']}-{p['index']}", p["node"], 16, 64)
            pod["metadata"].update(namespace=meta["namespace"],
                                   labels={c.PLACEMENT_LABEL: uid})
            have = self.find(kinds.POD, pod["metadata"]["name"], meta["namespace"])
            if have is None or have["spec"]["nodeName"] != p["node"]:
                if have is not None:  # placed again (its first Ready lost a race)
                    self.remove(kinds.POD, pod["metadata"]["name"], meta["namespace"])
                self.seed(kinds.POD, pod)

    def _kueue_lifts_gate(self, name: str, namespace: str) -> None:
        wl = self.find(kinds.WORKLOAD, name, namespace)
        if wl is not None:
            wl["metadata"]["annotations"].pop(gating.GATED_BY, None)
            self.seed(kinds.WORKLOAD, wl)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


# ----------------------------------------------------------------- the cluster


@dataclasses.dataclass
class Cluster:
    """What was seeded, for the feeder: node names, GPU slices, claims in use."""

    nodes: list[str]
    gpu_slices: list[str]
    claims: list[str]


def seed_cluster(api: fake.FakeClient, nodes: int, *, rack_size: int = rl.RACK_SIZE,
                 seed: int = SEED) -> Cluster:
    """The realistic cluster, the shapes, the templates and Kueue's objects, stored in
    the fake API server before the service lists them."""
    rng = random.Random(seed)
    out = Cluster([], [], [])
    objs: list[dict[str, Any]] = [*rl.classes(), *rl.shapes(), b200_shape(),
                                  *kueue_objects()]
    for t in templates().values():
        objs.append(t)
    for i in range(nodes):
        for o in rl.node_objects(rng, i, rack_size=rack_size):
            objs.append(o)
            name = o["metadata"]["name"]
            if o["kind"] == "Node":
                out.nodes.append(name)
            elif o["kind"] == "ResourceSlice" and name.endswith("-gpu"):
                out.gpu_slices.append(name)
            elif o["kind"] == "ResourceClaim":
                out.claims.append(name)
    for o in objs:
        api.seed(kinds.BY_NAME[o["kind"]], o)
    return out


def arrive(api: TimedClient, g: Gang) -> str:
    """A Job and its Workload appear (created by the user and by Kueue)."""
    created = api.seed(kinds.JOB, job(g))
    api.seed(kinds.WORKLOAD, workload(g, created["metadata"]["uid"]))
    key = f"{NAMESPACE}/{g.name}"
    api.arrived[key] = time.perf_counter()
    return key


# ----------------------------------------------------------------- background load

#: The feeder's mix of events (weights).
MIX = (("node-heartbeat", 30), ("pod-bound", 20), ("pod-finished", 20),
       ("claim-released", 13), ("claim-allocated", 13), ("slice-republished", 4))


class Feeder:
    """Node, slice, claim and pod changes at a steady rate, bounded: pods it binds
    finish again, claims it releases are allocated again."""

    def __init__(self, api: fake.FakeClient, cluster: Cluster, rate: float,
                 seed: int = SEED) -> None:
        self.api = api
        self.cluster = cluster
        self.rate = rate
        self.rng = random.Random(seed + 1)
        self.pods: list[str] = []
        self.released: list[dict[str, Any]] = []
        self.sent = 0
        self.serial = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        period, budget, due = 0.01, 0.0, loop.time()
        names, weights = zip(*MIX, strict=True)
        while True:
            due += period
            await asyncio.sleep(max(0.0, due - loop.time()))
            budget += self.rate * period
            while budget >= 1:
                budget -= 1
                self.one(self.rng.choices(names, weights)[0])

    def one(self, event: str) -> None:
        rng, api = self.rng, self.api
        node = self.cluster.nodes[rng.randrange(len(self.cluster.nodes))]
        if event == "node-heartbeat":
            n = api.find(kinds.NODE, node)
            if n is None:
                return
            n.setdefault("status", {})["conditions"] = [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": datetime.datetime.now(datetime.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ")}]
            api.seed(kinds.NODE, n)
        elif event == "pod-bound" or (event == "pod-finished" and not self.pods):
            self.serial += 1
            name = f"feed-{self.serial}"
            api.seed(kinds.POD, rl._pod(name, node, rng.randint(1, 8), rng.randint(1, 32)))
            self.pods.append(name)
        elif event == "pod-finished":
            api.remove(kinds.POD, self.pods.pop(rng.randrange(len(self.pods))), "running")
        elif event == "claim-allocated" and self.released:
            api.seed(kinds.RESOURCE_CLAIM, self.released.pop(rng.randrange(len(self.released))))
        elif event in ("claim-released", "claim-allocated") and self.cluster.claims:
            name = self.cluster.claims[rng.randrange(len(self.cluster.claims))]
            claim = api.find(kinds.RESOURCE_CLAIM, name, "running")
            if claim is None:
                return
            api.remove(kinds.RESOURCE_CLAIM, name, "running")
            for k in ("uid", "resourceVersion", "generation", "creationTimestamp"):
                claim["metadata"].pop(k, None)
            self.released.append(claim)
        elif event == "slice-republished":
            name = self.cluster.gpu_slices[rng.randrange(len(self.cluster.gpu_slices))]
            s = api.find(kinds.RESOURCE_SLICE, name)
            if s is None:
                return
            s["spec"]["pool"]["generation"] += 1
            api.seed(kinds.RESOURCE_SLICE, s)
        else:
            return
        self.sent += 1


_IDLE = ("threading.py:", "selectors.py:", "queue.py:", "thread.py:_worker",
         "base_events.py:_run_once")


def _idle(frame: Any) -> bool:
    """Whether a thread's innermost Python frame is a wait (a lock, a queue, select)."""
    where = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
    return where.startswith(_IDLE)


async def ticker(lags: list[float], period: float = 0.01) -> None:
    """The event loop's lag: how late each `period` sleep wakes."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(period)
        lags.append(loop.time() - started - period)


class Sampler:
    """A sampling profiler over every thread (cProfile sees only the thread that
    enables it; the decisions run in the inventory's and the gate's threads): every
    `interval` seconds, the innermost function of each thread's stack (self) and every
    function on it (cumulative), counted."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.own: dict[str, int] = {}
        self.cumulative: dict[str, int] = {}
        #: Whole stacks, outermost frame first, after the thread's name (frames named
        #: by package directory and file: `check/workload.py:sync_plan`).
        self.stacks: dict[tuple[str, ...], int] = {}
        self.samples = 0
        self._stop = False

    def run(self) -> None:
        me = threading.get_ident()
        names = {}
        while not self._stop:
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                f: Any = frame
                if _idle(f):
                    continue
                top = True
                seen = set()
                stack = []
                while f is not None:
                    code = f.f_code
                    where = f"{code.co_filename.rsplit('/', 2)[-1]}:{code.co_name}"
                    stack.append(f"{'/'.join(code.co_filename.rsplit('/', 2)[-2:])}:"
                                 f"{code.co_name}")
                    if top:
                        self.own[where] = self.own.get(where, 0) + 1
                        top = False
                    if where not in seen:
                        seen.add(where)
                        self.cumulative[where] = self.cumulative.get(where, 0) + 1
                    f = f.f_back
                if ident not in names:
                    names = {t.ident: t.name for t in threading.enumerate()}
                stack.append(f"thread:{names.get(ident, '?')}")
                key = tuple(reversed(stack))
                self.stacks[key] = self.stacks.get(key, 0) + 1
                self.samples += 1
            time.sleep(self.interval)

    def reset(self) -> None:
        """Forget what was sampled so far (the start and the warm-up, before a burst)."""
        self.own, self.cumulative, self.stacks, self.samples = {}, {}, {}, 0

    def stop(self) -> None:
        self._stop = True

    def report(self, top: int = 15) -> str:
        lines = [f"busy thread stacks sampled: {self.samples} (threads waiting left out)"]
        for title, counts in (("self", self.own), ("cumulative", self.cumulative)):
            lines.append(f"top {top} by {title}:")
            for where, n in sorted(counts.items(), key=lambda x: -x[1])[:top]:
                lines.append(f"  {n / max(self.samples, 1):6.1%}  {where}")
        return "\n".join(lines)


# ----------------------------------------------------------------- one run


@dataclasses.dataclass
class Result:
    nodes: int
    workloads: int
    decided: int  # by both controllers
    outcomes: dict[str, int]  # "gate:held", "check:Ready", ...
    expected: dict[str, str]  # workload key -> the gang's expected kind
    gate: dict[str, str]  # workload key -> gate decision
    check: dict[str, str]  # workload key -> check decision
    burst_s: float  # first arrival to last decision
    per_second: float  # Workloads decided (both controllers) per second
    p50_s: float
    p99_s: float
    gate_p99_s: float
    check_p99_s: float
    lag_max_ms: float
    lag_p99_ms: float
    events_per_s: float  # events applied to the caches during the burst
    offered_per_s: float  # events the feeder made during the burst
    start_s: float  # from the service's start to ready (initial list applied)
    rss_peak_mib: float
    rss_fake_mib: float  # the fake API server's objects (seeded before the service)
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    #: CPU seconds of the process (every thread, the fake API server's included) over the
    #: burst: per Workload decided, a figure the machine's other load changes far less
    #: than the rates.
    cpu_s: float = float("nan")
    #: The webhook's decision process's peak RSS (`--webhook`; 0: not started) and the
    #: questions it answered of those asked.
    rss_webhook_mib: float = 0.0
    webhook_answered: str = ""
    #: Over the burst: reconciles per controller and why keys were queued
    #: (`bench.loopwatch.reconciles`), and the loop's callbacks over 20 ms (`--slow`).
    counts: dict[str, float] = dataclasses.field(default_factory=dict)
    slow: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: CPU seconds over the burst by thread (`cpu_by_thread`): the event loop, the
    #: engine's decision thread, the gate's, the idle questions', the profiler's.
    threads: dict[str, float] = dataclasses.field(default_factory=dict)


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each of this process's threads, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def cpu_by_thread(before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
    """CPU seconds between two `thread_cpu` readings, by thread name (a pool's threads
    together: `fitgate-decide_0` and `_1` are `fitgate-decide`); threads that ended
    meanwhile are left out."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid, cpu in after.items():
        name = names.get(tid, "other")
        name = "event loop" if name == "MainThread" else name.rsplit("_", 1)[0]
        out[name] = out.get(name, 0.0) + cpu - before.get(tid, 0.0)
    return out


def rss_mib(pid: str = "self", field: str = "VmRSS") -> float:
    """A process's RSS (`VmHWM`: its peak) in MiB, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Webhook:
    """The webhook's decision process over the service's stores, asked what the pod
    hook asks of a new Job (`--webhook`)."""

    def __init__(self, svc: serve.Service) -> None:
        from admission.engine import fitting
        from admission.webhook import decider
        self.stores = {k: svc.informers.store(k) for k in (
            *fitting.IDLE_KINDS, kinds.RESOURCE_CLAIM_TEMPLATE, kinds.RESOURCE_CLAIM)}
        self.decider = decider.ProcessDecider(self.stores, kube_version=KUBE_VERSION,
                                              timeout=600.0)
        self.scope = fitpolicy.scope([], svc.informers.store(kinds.NODE_SHAPE).list(),
                                     namespace=NAMESPACE)
        self.asked: list[Any] = []

    def ask(self, g: Gang) -> None:
        from admission.engine import fitting
        obj = workload(g, "webhook")  # the gang the Job's review reads (its pod template)
        self.asked.append(self.decider.submit(obj, fitting.gang_of(obj, self.stores),
                                              self.scope))

    def peak_mib(self) -> float:
        proc = self.decider._proc
        return rss_mib(str(proc.pid), "VmHWM") if proc is not None else float("nan")

    def answered(self) -> str:
        done = sum(1 for f in self.asked if f.done() and f.exception() is None)
        return f"{done}/{len(self.asked)}"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def service(api: fake.FakeClient) -> serve.Service:
    """`fitgate serve`'s Service over the fake client: the default components, no
    leader election (one replica), no webhook server (no certificate directory),
    Kubernetes `KUBE_VERSION`'s semantics, serve's GIL switch interval."""
    cfg = config.load(env={}, flags={"health_address": "127.0.0.1", "health_port": 0,
                                     "leader_election": False, "log_level": "warning",
                                     "kube_version": KUBE_VERSION})
    # As `serve.serve` does before it starts the Service: how long the event loop waits
    # for the GIL held by a decision thread, per wait (`--switch-interval` overrides).
    sys.setswitchinterval(SWITCH_INTERVAL or cfg.switch_interval)
    return serve.Service(cfg, api, factories=components.factories())


async def _until_decided(api: TimedClient, keys: list[str], timeout: float,
                         progress: float | None = None) -> None:
    """Until every key has both decisions, or `timeout`; every `progress` seconds, how
    many have, on stderr."""
    started = time.perf_counter()
    said = started
    while time.perf_counter() - started < timeout:
        if all(k in api.gate and k in api.check for k in keys):
            return
        if progress and time.perf_counter() - said >= progress:
            said = time.perf_counter()
            print(f"  {said - started:5.0f} s: gate {len(api.gate)}, check {len(api.check)} "
                  f"of {len(keys)}", file=sys.stderr, flush=True)
        await asyncio.sleep(0.02)


class _Counter:
    """Counts store events of the feeder's kinds (what the caches applied)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, event: client.WatchEvent, before: client.Obj | None) -> None:
        self.count += 1


async def run(nodes: int, count: int, *, rate: float = 200.0, timeout: float = 600.0,
              rack_size: int = rl.RACK_SIZE, max_pods: int = 64,
              sampler: Sampler | None = None, progress: float | None = None,
              watch: loopwatch.SlowCallbacks | None = None, cycles: bool = False,
              webhook: bool = False) -> Result:
    """One measured run (see the module docstring)."""
    load_start = os.getloadavg()
    rss0 = rss_mib()
    api = TimedClient()
    cluster = seed_cluster(api, nodes, rack_size=rack_size)
    rss_fake = rss_mib() - rss0
    svc = service(api)
    counter = _Counter()
    for k in (kinds.NODE, kinds.POD, kinds.RESOURCE_SLICE, kinds.RESOURCE_CLAIM):
        svc.informers.store(k).subscribe(counter)
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(svc.run(stop))
    background: list[asyncio.Task[None]] = []
    try:
        while not svc.serving:
            if task.done():
                await task
            await asyncio.sleep(0.02)
        start_s = time.perf_counter() - started
        hook = Webhook(svc) if webhook else None
        # A service that has been running: each template's gang decided once.
        warm = [arrive(api, Gang(f"warm-{t}", 1, t, "")) for t in templates()]
        if hook is not None:
            for t in templates():
                hook.ask(Gang(f"warm-{t}", 1, t, ""))
            await asyncio.wrap_future(hook.asked[-1])
        await _until_decided(api, warm, timeout)
        for d in (api.arrived, api.gate, api.check):
            d.clear()
        lags: list[float] = []
        feeder = Feeder(api, cluster, rate)
        background = [asyncio.create_task(feeder.run()), asyncio.create_task(ticker(lags))]
        await asyncio.sleep(1.0)  # the feeder's steady state
        gangs = burst(count, max_pods=max_pods)
        lags.clear()
        events0, sent0 = counter.count, feeder.sent
        views0 = dict(getattr(svc.inventory._lane.engine, "views", {}))
        t0, cpu0, threads0 = time.perf_counter(), time.process_time(), thread_cpu()
        counts0 = {**loopwatch.reconciles(), **loopwatch.handoffs()}
        if watch is not None:
            watch.reset()
        if sampler is not None:
            sampler.reset()
        keys = []
        for i in range(0, len(gangs), 50):
            keys += [arrive(api, g) for g in gangs[i:i + 50]]
            for g in gangs[i:i + 50] if hook is not None else ():
                hook.ask(g)
            await asyncio.sleep(0)
        await _until_decided(api, keys, timeout, progress)
        burst_s = time.perf_counter() - t0
        cpu_s = time.process_time() - cpu0
        if hook is not None:  # the child's peak once it has answered (or 60 s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(
                    *(asyncio.wrap_future(f) for f in hook.asked), return_exceptions=True), 60)
        threads = cpu_by_thread(threads0, thread_cpu())
        counts = loopwatch.delta(counts0, {**loopwatch.reconciles(), **loopwatch.handoffs()})
        events, sent = counter.count - events0, feeder.sent - sent0
        views = getattr(svc.inventory._lane.engine, "views", None)
        if views is not None:  # how decisions had their gang's view (fitcore.inventory)
            burst_views = {k: n - views0.get(k, 0) for k, n in sorted(views.items())}
            print(f"# {nodes} nodes, views over the burst: {burst_views}", file=sys.stderr)
        if sampler is not None:
            sampler.stop()
        if cycles:
            # What the collector had not freed: every object back in its sight, one full
            # collection; the unreachable objects it finds are cyclic garbage that the
            # freezes (serve's, `runtime.collector`'s) had hidden from it.
            gc.unfreeze()
            counts["cyclic garbage found after the burst"] = float(gc.collect())
    finally:
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        webhook_peak = hook.peak_mib() if hook is not None else 0.0
        if hook is not None:
            hook.decider.close()
        stop.set()
        await asyncio.wait_for(task, 60)
    result = _result(api, gangs, keys, nodes=nodes, burst_s=burst_s, lags=lags,
                     events=events, sent=sent, start_s=start_s, rss_fake=rss_fake,
                     load_start=load_start, cpu_s=cpu_s, counts=counts,
                     slow=watch.report() if watch is not None else [], threads=threads)
    if hook is not None:
        result = dataclasses.replace(result, rss_webhook_mib=webhook_peak,
                                     webhook_answered=hook.answered())
    return result


def _result(api: TimedClient, gangs: list[Gang], keys: list[str], *, nodes: int,
            burst_s: float, lags: list[float], events: int, sent: int, start_s: float,
            rss_fake: float, load_start: tuple[float, float, float], cpu_s: float,
            counts: dict[str, float], slow: list[dict[str, Any]],
            threads: dict[str, float] | None = None) -> Result:
    decided = [k for k in keys if k in api.gate and k in api.check]
    both = [max(api.gate[k].at, api.check[k].at) - api.arrived[k] for k in decided]
    gate_s = [api.gate[k].at - api.arrived[k] for k in keys if k in api.gate]
    check_s = [api.check[k].at - api.arrived[k] for k in keys if k in api.check]
    outcomes: dict[str, int] = {}
    for stage, got in (("gate", api.gate), ("check", api.check)):
        for k in keys:
            what = f"{stage}:{got[k].kind}" if k in got else f"{stage}:undecided"
            outcomes[what] = outcomes.get(what, 0) + 1
    last = max((max(api.gate[k].at, api.check[k].at) for k in decided), default=0.0)
    span = (last - min(api.arrived[k] for k in keys)) if decided else burst_s
    return Result(
        nodes=nodes, workloads=len(keys), decided=len(decided), outcomes=outcomes,
        expected={f"{NAMESPACE}/{g.name}": g.expect for g in gangs},
        gate={k: d.kind for k, d in api.gate.items()},
        check={k: d.kind for k, d in api.check.items()},
        burst_s=span, per_second=len(decided) / span if span > 0 else float("nan"),
        p50_s=statistics.median(both) if both else float("nan"), p99_s=_pct(both, 0.99),
        gate_p99_s=_pct(gate_s, 0.99), check_p99_s=_pct(check_s, 0.99),
        lag_max_ms=max(lags, default=float("nan")) * 1e3, lag_p99_ms=_pct(lags, 0.99) * 1e3,
        events_per_s=events / burst_s, offered_per_s=sent / burst_s, start_s=start_s,
        rss_peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        rss_fake_mib=rss_fake, load_start=load_start, load_end=os.getloadavg(),
        cpu_s=cpu_s, counts=counts, slow=slow, threads=threads or {})


# ----------------------------------------------------------------- the table


def _one(nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size in this process (the parent runs each size in its own process, so each
    peak RSS is that size's alone)."""
    flog.configure("warning", "console")
    sampler = Sampler() if args.profile else None
    if sampler is not None:
        threading.Thread(target=sampler.run, daemon=True, name="sampler").start()
    watch = loopwatch.SlowCallbacks() if args.slow else None
    if watch is not None:
        watch.install()
    result = asyncio.run(run(nodes, args.workloads, rate=args.rate, timeout=args.timeout,
                             sampler=sampler, progress=15.0, watch=watch,
                             cycles=args.cycles, webhook=args.webhook))
    if sampler is not None:
        with open(f"{args.profile}.{nodes}.txt", "w") as f:
            f.write(sampler.report(40) + "\n")
        with open(f"{args.profile}.{nodes}.stacks", "w") as f:
            for stack, n in sorted(sampler.stacks.items(), key=lambda x: -x[1]):
                f.write(f"{';'.join(stack)} {n}\n")
    out = dataclasses.asdict(result)
    for k in ("expected", "gate", "check"):
        del out[k]
    if sampler is not None:  # the burst's CPU by part (`bench.cpusplit`)
        out["split"] = cpusplit.split(sampler.stacks, result.threads)
        out["waiting"] = cpusplit.waiting(sampler.stacks)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'nodes':>6} {'decided':>8} {'/s':>7} {'p50 s':>7} {'p99 s':>7} {'gate p99':>9}"
        f" {'check p99':>9} {'lag max':>8} {'lag p99':>8} {'events/s':>9} {'RSS MiB':>8}"
        f" {'(fake)':>7} {'load start':>11} {'load end':>9}"]
    for r in rows:
        lines.append(
            f"{r['nodes']:>6} {r['decided']:>4}/{r['workloads']:<4}"
            f"{r['per_second']:>7.1f} {r['p50_s']:>7.2f} {r['p99_s']:>7.2f}"
            f" {r['gate_p99_s']:>9.2f} {r['check_p99_s']:>9.2f}"
            f" {r['lag_max_ms']:>6.0f}ms {r['lag_p99_ms']:>6.1f}ms"
            f" {r['events_per_s']:>9.0f}"
            f" {r['rss_peak_mib'] + r.get('rss_webhook_mib', 0.0):>8.0f}"
            f" {r['rss_fake_mib']:>7.0f}"
            f" {r['load_start'][0]:>11.2f} {r['load_end'][0]:>9.2f}")
    lines.append("decided: Workloads decided by both the gate and the check; /s: those per "
                 "second, first arrival to last decision; p50/p99: arrival to the later of "
                 "the two decisions (of those decided: a burst cut short leaves the rest "
                 "waiting longer than it ran); lag: event loop (10 ms ticker); events/s: "
                 "node, pod, slice and claim events applied to the caches during the "
                 "burst; RSS: the "
                 "process's peak (with --webhook, plus the webhook's decision process's "
                 "peak), (fake): of which the fake API server's objects; "
                 "load: 1-minute load average of the machine")
    for r in rows:
        lines.append(f"{r['nodes']} nodes: ready {r['start_s']:.1f} s after start; burst "
                     f"{r['burst_s']:.1f} s; CPU {r['cpu_s']:.1f} s "
                     f"({r['cpu_s'] * 1e3 / max(r['decided'], 1):.0f} ms per Workload decided); "
                     f"feeder {r['offered_per_s']:.0f} events/s; "
                     + (f"webhook's decision process: peak RSS {r['rss_webhook_mib']:.0f} "
                        f"MiB, answered {r['webhook_answered']}; "
                        if r.get("webhook_answered") else "")
                     + ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items())))
        threads = r.get("threads") or {}
        if threads:
            lines.append("  CPU per Workload decided, by thread: " + ", ".join(
                f"{name} {cpu * 1e3 / max(r['decided'], 1):.1f} ms"
                for name, cpu in sorted(threads.items(), key=lambda x: -x[1]) if cpu > 0))
        split = r.get("split") or {}
        if split:
            lines.append("  CPU per Workload decided, by part (--profile): " + ", ".join(
                f"{name} {cpu * 1e3 / max(r['decided'], 1):.1f} ms"
                for name, cpu in split.items())
                + f"; samples waiting for the GIL after a wake-up: {r.get('waiting', 0):.0%}")
        counts = r.get("counts") or {}
        if counts:
            per = ", ".join(f"{k.split()[1]} {v / max(r['workloads'], 1):.2f}"
                            for k, v in sorted(counts.items()) if k.startswith("reconciles "))
            lines.append(f"  reconciles per Workload of the burst: {per}")
            if "cyclic garbage found after the burst" in counts:
                lines.append(f"  cyclic garbage found after the burst (--cycles): "
                             f"{counts['cyclic garbage found after the burst']:.0f} objects")
            if "handoff delivered" in counts:
                lines.append(f"  decision results handed to the loop: "
                             f"{counts['handoff delivered']:.0f} with "
                             f"{counts.get('handoff wakeups', 0):.0f} wake-ups")
            lines.append("  queued by (controller cause outcome: count): " + ", ".join(
                f"{k[5:]}: {v:.0f}" for k, v in sorted(counts.items(), key=lambda x: -x[1])
                if k.startswith("adds ")))
        for cb in r.get("slow") or []:
            lines.append(f"  loop callback over 20 ms: {cb['count']}x, total "
                         f"{cb['total_s']:.2f} s (CPU {cb.get('cpu_s', float('nan')):.2f} s), "
                         f"max {cb['max_s'] * 1e3:.0f} ms: "
                         f"{cb['callback']}")
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> str:
    """Issue 23 item 2's targets, met or missed (at the size each is set for)."""
    by = {r["nodes"]: r for r in rows}
    all_decided = {n: r["decided"] == r["workloads"] for n, r in by.items()}
    checks: tuple[tuple[str, int, str, Callable[[dict[str, Any]], float],
                        Callable[[float, int], bool]], ...] = (
        (f"gang decisions ≥ {DECISIONS_TARGET:.0f}/s", 5000, "/s",
         lambda r: r["per_second"], lambda v, n: v >= DECISIONS_TARGET and all_decided[n]),
        (f"p99 arrival to decision ≤ {P99_TARGET_S:g} s", 5000, " s",
         lambda r: r["p99_s"], lambda v, n: v <= P99_TARGET_S and all_decided[n]),
        (f"event-loop lag p99 ≤ {LAG_P99_TARGET_MS:.0f} ms", 5000, " ms",
         lambda r: r["lag_p99_ms"], lambda v, n: v <= LAG_P99_TARGET_MS),
        (f"RSS of all processes ≤ {RSS_TARGET_MIB:.0f} MiB (the fake API server's share "
         "left out)", 10000, " MiB",
         lambda r: r["rss_peak_mib"] + r.get("rss_webhook_mib", 0.0) - r["rss_fake_mib"],
         lambda v, n: v <= RSS_TARGET_MIB),
    )
    lines = []
    for what, nodes, unit, get, ok in checks:
        r = by.get(nodes)
        if r is None:
            lines.append(f"{what}: not measured ({nodes:,} nodes not run)")
            continue
        v = float(get(r))
        verdict = "met" if ok(v, nodes) else "missed"
        if unit == " MiB" and not r.get("webhook_answered"):
            verdict += " by the controllers' process (the webhook's not started: --webhook)"
        lines.append(f"{what}: {v:.2f}{unit} at {nodes:,} nodes: {verdict}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000",
                        help="cluster sizes, comma-separated (e.g. 1000,5000,10000)")
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0,
                        help="background events per second (node, slice, claim, pod)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds the burst may take before it is cut short")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="sample every thread's stack; write PREFIX.<nodes>.txt")
    parser.add_argument("--slow", action="store_true",
                        help="time the event loop's callbacks; list those over 20 ms")
    parser.add_argument("--cycles", action="store_true",
                        help="after the burst, count the cyclic garbage the collector's "
                             "freezes hid (one full collection of everything)")
    parser.add_argument("--switch-interval", type=float,
                        help="the GIL switch interval in seconds (default: serve's)")
    parser.add_argument("--webhook", action="store_true",
                        help="start the webhook's decision process and ask it about every "
                             "Job (its peak RSS counts in the RSS target)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        global SWITCH_INTERVAL
        SWITCH_INTERVAL = args.switch_interval
        print(json.dumps(_one(args.one, args)))
        return
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        argv = [sys.executable, "-m", "bench.controller", "--one", str(n),
                "--workloads", str(args.workloads), "--rate", str(args.rate),
                "--timeout", str(args.timeout)]
        if args.profile:
            argv += ["--profile", args.profile]
        if args.slow:
            argv += ["--slow"]
        if args.cycles:
            argv += ["--cycles"]
        if args.webhook:
            argv += ["--webhook"]
        if args.switch_interval:
            argv += ["--switch-interval", str(args.switch_interval)]
        done = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{n} nodes done: {rows[-1]['decided']} decided in "
              f"{rows[-1]['burst_s']:.1f} s", file=sys.stderr, flush=True)
    print(table(rows))
    print(targets(rows))


if __name__ == "__main__":
    main()
