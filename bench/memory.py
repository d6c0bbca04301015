"""Where `fitgate serve`'s memory is, on the realistic cluster of `bench.controller`.

    .venv/bin/python -m bench.memory [--nodes 10000] [--workloads 200] [--burst-timeout 120]

Seeds `bench.controller`'s cluster (realistic nodes, slices, claims, bound pods, shapes,
Kueue's objects) into the project's fake API client, starts serve's `Service` over it,
waits until it serves and each of the bench's claim templates was decided once, and
then (with `--workloads`) lets a burst of that many Workloads be decided (or cut at
`--burst-timeout`), with no feeder. After the start and after the burst it prints the
process's RSS and the size of each part, by walking the objects each part holds
(`sys.getsizeof` of every object reachable from it and not from a part measured before
it): the fake API server first (it is not fitgate's), then the informers' stores, the
live engine's parsed objects, its per-node index, its per-gang kept work, its caches,
the gate's idle engine (what it does not share with the live one), and what fitcore's
modules keep. What no part reaches (the allocator's arrays, interpreter overhead, freed
memory the allocator keeps) is the RSS less the parts. `docs/serve.md` ("Memory at
10,000 nodes") has its table; `tests/bench/test_memory.py` runs it at 20 nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
import types
from collections.abc import Iterable
from typing import Any

from admission.engine import fitting
from admission.engine import inventory as engine_inventory
from bench import controller as bc

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType, types.CodeType, types.FrameType)


def deep_size(roots: Iterable[Any], seen: set[int]) -> int:
    """Bytes of every object reachable from `roots` not in `seen` (which it extends);
    classes, modules, functions and frames are not followed."""
    total = 0
    stack = [r for r in roots]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def _engine_parts(engine: Any) -> list[tuple[str, list[Any]]]:
    """A fitcore Inventory's attributes, by part."""
    model = ["_nodes", "_names", "_slices", "_rules", "_pool_slices", "_owner", "_node_pools",
             "_global", "_classes", "_claims", "_pool_claims", "_allocated", "_pods",
             "_bound", "_bound_list", "_used", "_shapes"]
    index = ["_keys", "_device_keys", "_parts", "_entries", "_snapshot", "_index", "_log"]
    gangs = ["_gangs", "_scratch"]
    caches = ["_store"]
    named = {*model, *index, *gangs, *caches}
    rest = [k for k in vars(engine) if k not in named] if hasattr(engine, "__dict__") else []

    def get(names: list[str]) -> list[Any]:
        return [getattr(engine, n) for n in names if hasattr(engine, n)]
    return [("parsed objects", get(model)), ("per-node index", get(index)),
            ("per-gang kept work", get(gangs)), ("caches (cache.Store)", get(caches)),
            ("other", get(rest))]


def measure(svc: Any, api: Any) -> list[tuple[str, float]]:
    """MiB per part, in the order measured (see the module docstring)."""
    gc.collect()
    seen: set[int] = set()
    mib = 1 / (1024 * 1024)
    out = [("fake API server (not fitgate)", deep_size([api._objects, api._history], seen) * mib)]
    out.append(("informer stores", deep_size(
        [s._objects for s in svc.informers.stores().values()]
        + [s._by_namespace for s in svc.informers.stores().values()], seen) * mib))
    live = svc.inventory._lane.engine
    for name, roots in _engine_parts(live):
        out.append((f"live engine: {name}", deep_size(roots, seen) * mib))
    out.append(("live ClusterInventory (queue, refs)", deep_size([svc.inventory], seen) * mib))
    gc.unfreeze()  # serve freezes what it loaded; get_objects does not list frozen ones
    idles = [o for o in gc.get_objects() if isinstance(o, fitting.StoreEngine)]
    for n, idle in enumerate(idles):
        for name, roots in _engine_parts(idle._inventory._lane.engine):
            out.append((f"idle engine {n + 1}: {name}", deep_size(roots, seen) * mib))
    mods = [m for n, m in sorted(sys.modules.items())
            if n.startswith("fitcore") or n == "admission.kube.compact"]
    out.append(("fitcore's and compact's module-level caches",
                deep_size([vars(m) for m in mods], seen) * mib))
    return out


def kept(svc: Any) -> str:
    """What the engines keep, counted (views kept and evicted, kept problems, ...) and how
    many Nodes and ResourceSlices one engine took parsed from another."""
    engines = [("live", svc.inventory._lane.engine)] + [
        (f"idle {n + 1}", e._inventory._lane.engine) for n, e in enumerate(
            o for o in gc.get_objects() if isinstance(o, fitting.StoreEngine))]
    names = ("gangs kept", "views kept", "views evicted", "kept entries", "kept problems")
    lines = [f"  {label}: " + ", ".join(f"{k} {e.stats()[k]:,}" for k in names)
             for label, e in engines]
    parsed = engine_inventory.PARSED
    lines.append(f"  Nodes and ResourceSlices parsed {parsed.parses:,}, taken parsed "
                 f"{parsed.hits:,}")
    return "\n".join(lines)


def report(title: str, parts: list[tuple[str, float]], rss: float) -> None:
    # (The walk itself holds a set of every object's id: the peak RSS after it is not
    # the service's; `rss` is taken before it.)
    print(f"\n{title}: RSS {rss:,.0f} MiB, load {os.getloadavg()[0]:.1f}")
    for name, size in parts:
        print(f"  {name:<44} {size:>8,.1f} MiB")
    counted = sum(s for _, s in parts)
    print(f"  {'(not reached by a part: RSS less the parts)':<44} {rss - counted:>8,.1f} MiB")


async def run(nodes: int, workloads: int, timeout: float) -> None:
    rss0 = bc.rss_mib()
    api = bc.TimedClient()
    bc.seed_cluster(api, nodes)
    print(f"{nodes:,} nodes seeded: RSS {bc.rss_mib():,.0f} MiB ({bc.rss_mib() - rss0:,.0f} the "
          f"fake API's), load {os.getloadavg()[0]:.1f}", flush=True)
    svc = bc.service(api)
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(svc.run(stop))
    try:
        while not svc.serving:
            if task.done():
                await task
            await asyncio.sleep(0.05)
        warm = [bc.arrive(api, bc.Gang(f"warm-{t}", 1, t, "")) for t in bc.templates()]
        await bc._until_decided(api, warm, 600)
        print(f"serving after {time.perf_counter() - started:.0f} s; peak RSS so far "
              f"{bc.resource.getrusage(bc.resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB",
              flush=True)
        rss = bc.rss_mib()
        report("after the start (list, inventory, each template decided once)",
               measure(svc, api), rss)
        print(kept(svc))
        if workloads:
            gangs = bc.burst(workloads)
            keys = [bc.arrive(api, g) for g in gangs]
            t0 = time.perf_counter()
            await bc._until_decided(api, keys, timeout, 30)
            done = sum(1 for k in keys if k in api.gate and k in api.check)
            rss = bc.rss_mib()
            report(f"after a burst of {workloads} ({done} decided in "
                   f"{time.perf_counter() - t0:.0f} s)", measure(svc, api), rss)
            print(kept(svc))
        print(f"\npeak RSS {bc.resource.getrusage(bc.resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f}"
              " MiB (the walks' own sets of object ids included)")
    finally:
        stop.set()
        await asyncio.wait([task], timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--workloads", type=int, default=200)
    ap.add_argument("--burst-timeout", type=float, default=120.0)
    args = ap.parse_args()
    bc.flog.configure("warning", "console")
    asyncio.run(run(args.nodes, args.workloads, args.burst_timeout))
    # Decision threads still finishing a decision would hold the exit; the figures are out.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
