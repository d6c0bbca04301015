"""Gang decisions on realistic clusters, through `fitcore.inventory.Inventory`.

    .venv/bin/python -m bench.realistic [--sizes 1000,5000,10000] [--repeat N] [--json PATH]
    .venv/bin/python -m bench.realistic --memory 10000
    .venv/bin/python -m bench.realistic --breakdown 1000

The clusters come from `tests/gang/realistic.py` (seed 1): racks of 40 nodes, three GPU
models by rack (H100 16 GPUs, A100 8 GPUs, MIG-partitioned A30), two NIC layouts, unique
`uuid`/`pciBusID`/MAC attributes, random devices and MIG partitions in use per node,
random bound pods. Objects are fed to an Inventory as ADDED events.

Gangs: 8, 64 and 256 pods, each pod 8 H100 GPUs and the NIC of one PCIe root, 16 cpu,
64Gi. Scenarios: `fit` (anywhere), `rack` (all pods in one rack, no NodeShapes) and
`rack+shapes` (the same with two H100 NodeShapes: a plan when no rack is free enough).

Times are wall-clock milliseconds with the process CPU time in brackets (steadier on a
shared machine); the inventory is frozen out of the garbage collector's way after loading
(`gc.freeze()`), as a service would do with its long-lived inventory. Columns: `cold` is
the first decision of this gang on a freshly loaded inventory (its projection of every
node, its fills; the inventory's snapshot is built too); `warm` the
median of the same decision repeated; `1% changed` the median decision right after 1%
of the nodes changed (their allocated claim replaced or released, a pod bound or
finished: events applied through `apply`), `allocs` the allocator calls of the cold
decision and `classes` its node classes. Below the table: µs per event, loading (all
kinds, parsing included), the change events alone, a 16-GPU ResourceSlice republished
with fresh content (MODIFIED, median; the worst case) and then as drivers usually
republish it (the same devices, one newly tainted, a new pool generation), and the growth
from the smallest to the largest size.

With `--memory N`: load N nodes, decide, and report tracemalloc's traced memory (current
and peak) and the process's resident set size (a separate run: tracing slows
everything down). With `--breakdown N`: where one cold decision on N nodes spends its
CPU (node index, projection, allocator, the rest).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import random
import resource
import statistics
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

from fitcore import (
    _alloc,  # noqa: F401  (fail loudly when the extension is not built)
    gang,
    inventory,
    plan,
    workload,
)
from tests.gang import realistic as rl

SEED = 1
TEMPLATES = {("team", "h100-root"): rl.template()}
GANGS = (8, 64, 256)
SCENARIOS = ("fit", "rack", "rack+shapes")


def objects(nodes: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(SEED)
    yield from rl.classes()
    for i in range(nodes):
        yield from rl.node_objects(rng, i)


def load(nodes: int) -> tuple[inventory.Inventory, float, int]:
    """The initial list, as a service would feed it: without garbage collection while
    the inventory grows (the caller freezes it afterwards)."""
    inv = inventory.Inventory()
    spent, events = 0.0, 0
    gc.disable()
    try:
        for o in objects(nodes):
            started = time.perf_counter()
            inv.apply("ADDED", o)
            spent += time.perf_counter() - started
            events += 1
        for o in rl.shapes():
            inv.apply("ADDED", o)
    finally:
        gc.enable()
    return inv, spent, events


def gang_for(pods: int, scenario: str) -> gang.Gang:
    return workload.gang_of(rl.workload(pods, topology=scenario != "fit"), TEMPLATES)


def decide(inv: inventory.Inventory, g: gang.Gang, scenario: str) -> plan.PlanResult:
    return inv.plan(g) if scenario == "rack+shapes" else inv.fit(g)


def change(inv: inventory.Inventory, nodes: int, rng: random.Random) -> tuple[float, int]:
    """1% of the nodes change: their claim of devices in use is replaced (or released)
    and a pod is bound or finishes. Returns (seconds spent in apply, events)."""
    spent, events = 0.0, 0
    for i in rng.sample(range(nodes), max(1, nodes // 100)):
        fresh = rl.node_objects(random.Random(rng.random()), i)
        claim = next((o for o in fresh if o["kind"] == "ResourceClaim"), None)
        name = f"node-{i:05d}"
        todo: list[tuple[str, dict[str, Any]]] = []
        if claim is not None:
            todo.append(("MODIFIED", claim))
        else:
            todo.append(("DELETED", {"apiVersion": "resource.k8s.io/v1",
                                     "kind": "ResourceClaim", "metadata": {
                                         "name": f"busy-{name}", "namespace": "running"}}))
        pod = rl._pod(f"pod-{name}-change-{rng.randrange(1 << 30)}", name,
                      rng.randint(1, 32), rng.randint(1, 64))
        todo.append(("ADDED", pod))
        for event, o in todo:
            started = time.perf_counter()
            inv.apply(event, o)  # type: ignore[arg-type]
            spent += time.perf_counter() - started
            events += 1
    return spent, events


def slice_events(inv: inventory.Inventory, nodes: int, rng: random.Random,
                 count: int = 200) -> tuple[float, float]:
    """Median seconds of one MODIFIED event of a 16-GPU ResourceSlice (an H100 node's),
    parsing included: republished with fresh content (new uuids and bus ids: the worst
    case), and then again as drivers usually republish it (the same devices, one of them
    newly tainted, the pool's generation one higher)."""
    h100 = [i for i in range(nodes) if rl.model_of(i) == "H100"]
    fresh_s: list[float] = []
    same_s: list[float] = []
    for i in rng.sample(h100, min(count, len(h100))):
        fresh = rl.node_objects(random.Random(rng.random()), i)
        gpu = next(o for o in fresh if o["kind"] == "ResourceSlice"
                   and len(o["spec"].get("devices", ())) == 16)
        again = copy.deepcopy(gpu)
        again["spec"]["pool"]["generation"] += 1
        again["spec"]["devices"][i % 16]["taints"] = [
            {"key": "gpu.example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}]
        for obj, into in ((gpu, fresh_s), (again, same_s)):
            started = time.perf_counter()
            inv.apply("MODIFIED", obj)
            into.append(time.perf_counter() - started)
    return statistics.median(fresh_s), statistics.median(same_s)


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def timed_cpu(fn: Any) -> tuple[float, float, Any]:
    """Wall and process CPU seconds (CPU time is steadier on a shared machine)."""
    started, started_cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - started, time.process_time() - started_cpu, out


def fresh(nodes: int) -> inventory.Inventory:
    inv, _, _ = load(nodes)
    gc.collect()
    gc.freeze()  # the inventory is long-lived, as in the service
    return inv


def measure(nodes: int, repeat: int, fresh_per_row: bool) -> tuple[list[dict[str, Any]],
                                                                   dict[str, float]]:
    rows = []
    rng = random.Random(7)
    inv, load_s, load_events = load(nodes)
    gc.collect()
    gc.freeze()
    change_s, change_events = 0.0, 0
    for pods in GANGS:
        for scenario in SCENARIOS:
            if fresh_per_row and rows:
                gc.unfreeze()
                del inv
                gc.collect()
                inv = fresh(nodes)
            g = gang_for(pods, scenario)
            cold, cold_cpu, result = timed_cpu(lambda: decide(inv, g, scenario))
            warm = [timed_cpu(lambda: decide(inv, g, scenario))
                    for _ in range(repeat)]
            changed = []
            for _ in range(3):
                s, e = change(inv, nodes, rng)
                change_s += s
                change_events += e
                changed.append(timed_cpu(lambda: decide(inv, g, scenario)))
            rows.append({
                "nodes": nodes, "pods": pods, "scenario": scenario,
                "cold_ms": cold * 1e3, "cold_cpu_ms": cold_cpu * 1e3,
                "warm_ms": statistics.median(w for w, _, _ in warm) * 1e3,
                "warm_cpu_ms": statistics.median(c for _, c, _ in warm) * 1e3,
                "changed_ms": statistics.median(w for w, _, _ in changed) * 1e3,
                "changed_cpu_ms": statistics.median(c for _, c, _ in changed) * 1e3,
                "allocations": result.stats.allocations, "classes": result.stats.classes,
                "verdict": result.verdict,
                "plan": ([(s.shape, s.count) for s in result.plan.shapes]
                         if result.plan else None)})
    slice_s, same_slice_s = slice_events(inv, nodes, rng)
    gc.unfreeze()
    per_event = {"load_us": load_s / load_events * 1e6,  # the first load of this size
                 "change_us": change_s / max(change_events, 1) * 1e6,
                 "slice_us": slice_s * 1e6,
                 "same_slice_us": same_slice_s * 1e6,
                 "load_s": load_s}
    return rows, per_event


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(nodes: int) -> None:
    tracemalloc.start()
    inv, load_s, events = load(nodes)
    loaded = tracemalloc.get_traced_memory()
    for pods in GANGS:
        for scenario in SCENARIOS:
            decide(inv, gang_for(pods, scenario), scenario)
    decided = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    stats = inv.stats()
    print(f"{nodes} nodes, {stats['devices']} devices ({events} objects, loaded in "
          f"{load_s:.1f}s under tracemalloc)")
    print(f"tracemalloc after load: {loaded[0] / 2**20:.0f} MiB (peak {loaded[1] / 2**20:.0f})")
    print(f"tracemalloc after the 9 decisions: {decided[0] / 2**20:.0f} MiB "
          f"(peak {decided[1] / 2**20:.0f})")
    print(f"resident set size now: {rss_mib():.0f} MiB; peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print("kept: " + ", ".join(f"{k} {v}" for k, v in stats.items()))


def breakdown(nodes: int) -> None:
    """Where one cold decision (64 pods, anywhere) spends its process CPU: the node
    index (`Inventory._current`), the projection of every node (`Inventory._projected_all`),
    the allocator calls (`api.allocate`), and the rest (the search over cells, the view's
    index, the first collection after the decision). Timed by wrapping those functions
    for this run only."""
    from fitcore import api

    inv = fresh(nodes)
    g = gang_for(64, "fit")
    spent: dict[str, float] = {}
    saved = []

    def timing(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)
        saved.append((owner, name, inner))

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - started
        setattr(owner, name, timed_call)

    timing(inventory.Inventory, "_current", "node index (_current)")
    timing(inventory.Inventory, "_projected", "projection of every node")
    timing(inventory.Inventory, "_projected_all", "projection of every node")
    timing(api, "allocate", "allocator calls")
    try:
        _, cpu, result = timed_cpu(lambda: decide(inv, g, "fit"))
    finally:
        for owner, name, inner in saved:
            setattr(owner, name, inner)
    print(f"{nodes} nodes, one cold decision: {cpu * 1e3:.1f} ms CPU, "
          f"{result.stats.allocations} allocator calls, {result.stats.classes} classes")
    for label, seconds in spent.items():
        print(f"  {label:28s}{seconds * 1e3:8.1f}")
    print(f"  {'the rest':28s}{(cpu - sum(spent.values())) * 1e3:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--memory", type=int, metavar="NODES")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--breakdown", type=int, metavar="NODES")
    args = parser.parse_args()
    if args.memory:
        memory(args.memory)
        return
    if args.breakdown:
        breakdown(args.breakdown)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    events: dict[int, dict[str, float]] = {}
    for n in sizes:
        got, per_event = measure(n, args.repeat, fresh_per_row=True)
        rows += got
        events[n] = per_event
    print("milliseconds, wall (process CPU)")
    print(f"{'nodes':>6} {'pods':>5} {'scenario':<12}{'cold':>16}{'warm':>14}"
          f"{'1% changed':>16}{'allocs':>8}{'classes':>9}  result")
    for r in rows:
        what = r["verdict"] + (f" {r['plan']}" if r["plan"] else "")
        print(f"{r['nodes']:>6} {r['pods']:>5} {r['scenario']:<12}"
              f"{r['cold_ms']:>8.1f} ({r['cold_cpu_ms']:>5.0f})"
              f"{r['warm_ms']:>7.2f} ({r['warm_cpu_ms']:>4.1f})"
              f"{r['changed_ms']:>8.1f} ({r['changed_cpu_ms']:>5.1f})"
              f"{r['allocations']:>8}{r['classes']:>9}  {what}")
    print("cold: the first decision on a freshly loaded inventory (each row loads its own)")
    for n, e in events.items():
        print(f"{n} nodes: loading {e['load_s']:.1f}s, {e['load_us']:.0f} us/event (parsing "
              f"included); change events (claims, pods) {e['change_us']:.0f} us/event; "
              f"a 16-GPU ResourceSlice republished {e['slice_us']:.0f} us (median; the "
              f"same devices, one newly tainted: {e['same_slice_us']:.0f} us)")
    lo, hi = min(sizes), max(sizes)
    if lo != hi:
        for key, label in (("warm_ms", "warm"), ("warm_cpu_ms", "warm cpu"),
                           ("changed_ms", "1% changed"), ("changed_cpu_ms", "1% changed cpu")):
            a = [r[key] for r in rows if r["nodes"] == lo]
            b = [r[key] for r in rows if r["nodes"] == hi]
            growth = statistics.median(y / max(x, 1e-3) for x, y in zip(a, b, strict=True))
            print(f"growth {lo:,} -> {hi:,} nodes, {label}: median x{growth:.1f} "
                  f"(x{hi / lo:.0f} would be linear)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "events": events}, f, indent=2)


if __name__ == "__main__":
    main()
