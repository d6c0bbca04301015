"""Gang decisions: a 64-pod gang with rack topology over 100 / 1,000 / 5,000 nodes.

    .venv/bin/python -m bench.gang [--repeat N] [--sizes 100,1000,5000] [--json PATH]

Each node has 16 GPUs on two PCIe roots (8 per root) and one NIC per root. Each pod asks
for 8 GPUs on one root plus the NIC on the same root (one ResourceClaimTemplate with a
matchAttribute constraint), so a node holds two pods. Nodes sit in racks of 40; a third
of the nodes already run something on one root. The gang needs all 64 pods in one rack.

Three scenarios per size:
- `fit`: the gang fits existing nodes (some racks are still free enough).
- `plan`: every rack is too busy, so the decision goes on to NodeShapes: a cheaper shape
  whose NIC shares no root with a GPU (cannot host a pod) and a rail-aligned one.
- `no-fit`: every rack is too busy and there are no shapes (the answer is "capacity").

Times are medians (and minimums; and the median of process CPU time, steadier on a
busy machine) of whole decisions (`plan.plan`: placement, and for `plan` the shape
search) on a prepared `gang.Snapshot`; building the snapshot is reported separately, from
scratch and rebuilt from the previous one when nothing changed (what a service pays per
inventory change, plus the changed nodes). Nothing is cached between
decisions except what the process keeps anyway (compiled CEL programs).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from typing import Any

from fitcore import (
    _alloc,  # noqa: F401  (fail loudly when the extension is not built)
    gang,
    plan,
    workload,
)
from tests.fitcore import builders as b
from tests.gang import builders as gb

RACK_SIZE = 40
PODS = 64


def cluster(nodes: int, busy_racks: bool, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = [*gb.classes()]
    for i in range(nodes):
        name = f"gpu-{i:05d}"
        rack = f"rack-{i // RACK_SIZE:03d}"
        objects += gb.gpu_node(name, gpus=16, roots=2, rack=rack, cpu="128")
        # A third of the nodes run something on root pci0; with busy racks, every rack
        # is so busy that no rack holds 64 pods.
        if rng.random() < (0.75 if busy_racks else 0.33):
            objects.append(gb.allocated(f"busy-{name}", name,
                                        [(b.GPU, f"gpu-{d}") for d in range(8)]
                                        + [(b.NIC, "nic-0")]))
    return objects


def shapes() -> list[dict[str, Any]]:
    return [gb.shape("h100-basic", price="9.5", gpus=16, roots=2, nics=["pci9"], cpu="128",
                     per_domain=RACK_SIZE),
            gb.shape("h100-rail", price=12, gpus=16, roots=2, cpu="128", per_domain=RACK_SIZE)]


def gang_objects() -> list[dict[str, Any]]:
    return [gb.template("gpus", gpus=8), gb.workload(gb.pod_set(
        "workers", PODS, cpu="32", templates=("gpus",), topology=gb.RACK))]


def measure(nodes: int, scenario: str, repeat: int) -> dict[str, Any]:
    objects = cluster(nodes, busy_racks=scenario != "fit")
    if scenario == "plan":
        objects += shapes()
    bundle = workload.load([(o, None) for o in [*objects, *gang_objects()]])
    started = time.perf_counter()
    snapshot = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used)
    build = time.perf_counter() - started
    g = bundle.gangs[0]
    gc.collect()
    gc.freeze()  # the inventory is long-lived, as in the service
    started = time.perf_counter()
    gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used, previous=snapshot)
    rebuild = time.perf_counter() - started
    times, cpu = [], []
    result = None
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = plan.plan(g, snapshot, bundle.shapes)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    gc.unfreeze()
    assert result is not None
    expected = {"fit": "fits", "plan": "needs-capacity", "no-fit": "unsatisfiable"}[scenario]
    assert result.verdict == expected, (result.verdict, result.reasons)
    return {"nodes": nodes, "scenario": scenario, "median_ms": statistics.median(times) * 1e3,
            "min_ms": min(times) * 1e3, "cpu_ms": statistics.median(cpu) * 1e3,
            "first_ms": times[0] * 1e3,
            "snapshot_ms": build * 1e3, "rebuild_ms": rebuild * 1e3,
            "allocations": result.stats.allocations, "classes": result.stats.classes,
            "verdict": result.verdict,
            "plan": ([(s.shape, s.count) for s in result.plan.shapes] if result.plan else None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    scenarios = ("fit", "plan", "no-fit")
    rows = [measure(n, scenario, args.repeat) for scenario in scenarios for n in sizes]
    print(f"{'scenario':<9}{'nodes':>7}{'median ms':>11}{'min ms':>8}{'cpu ms':>8}"
          f"{'first ms':>10}"
          f"{'snapshot ms':>13}{'rebuild ms':>12}"
          f"{'allocs':>8}{'classes':>9}  result")
    for r in rows:
        what = r["verdict"] + (f" {r['plan']}" if r["plan"] else "")
        print(f"{r['scenario']:<9}{r['nodes']:>7}{r['median_ms']:>11.2f}{r['min_ms']:>8.2f}"
              f"{r['cpu_ms']:>8.2f}"
              f"{r['first_ms']:>10.2f}{r['snapshot_ms']:>13.1f}{r['rebuild_ms']:>12.1f}"
              f"{r['allocations']:>8}{r['classes']:>9}  {what}")
    for scenario in scenarios:
        by = {r["nodes"]: r for r in rows if r["scenario"] == scenario}
        if 1000 in by and 5000 in by:
            growth = {k: by[5000][k] / by[1000][k] for k in ("median_ms", "min_ms", "cpu_ms")}
            print(f"{scenario}: growth 1,000 -> 5,000 nodes: median x{growth['median_ms']:.2f}, "
                  f"min x{growth['min_ms']:.2f}, cpu x{growth['cpu_ms']:.2f} "
                  "(x5 would be linear)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
