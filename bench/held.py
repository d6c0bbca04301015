"""What held nodes cost a decision on a kept view (issue 23, item 1).

    .venv/bin/python -m bench.held [NODES]

One `fitcore.Inventory` of `tests/gang/realistic.py`'s cluster (default 5,000 nodes) and
`bench.controller`'s templates. Prints the median of 7 decisions (ms) of an 8-pod gang
already decided once: without held nodes, with one node in 50 held, and as another
Workload of the same content with a held set that changes each time (what the check
does during a burst); then the time for the 42 gang contents of the controller bench's
burst (templates x pod counts) decided once each with those held nodes, and how much
the process's RSS grew over all of it. Figures, not assertions.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import controller as bc
from fitcore import gang, inventory, workload
from tests.gang import realistic as rl


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def median_ms(fn: Callable[[], Any], runs: int = 7) -> float:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return statistics.median(out)


def main(nodes: int) -> None:
    templates = list(bc.templates().values())
    inv = inventory.Inventory()
    for o in [*rl.cluster(nodes), *rl.shapes()]:
        inv.apply("ADDED", o)

    def gang_of(name: str, pods: int = 8, template: str = "h100-root") -> gang.Gang:
        return workload.gang_of(rl.workload(pods, template_name=template, name=name),
                                templates)

    base = rss_mib()
    held = [f"node-{i:05d}" for i in range(0, nodes, 50)]
    started = time.perf_counter()
    inv.plan(gang_of("a"))
    print(f"{nodes} nodes: first decision {(time.perf_counter() - started) * 1000:.0f} ms")
    print(f"  again, no held nodes: {median_ms(lambda: inv.plan(gang_of('a'))):.1f} ms")
    print(f"  again, {len(held)} held: "
          f"{median_ms(lambda: inv.plan(gang_of('a'), held=held)):.1f} ms")
    n = [0]

    def another() -> None:
        n[0] += 1
        inv.plan(gang_of(f"b{n[0]}"), held=held[:len(held) - n[0]])

    print(f"  another Workload of the same content, held set changing: "
          f"{median_ms(another):.1f} ms")
    started = time.perf_counter()
    contents = [(t, p) for t in bc.templates() for p in sorted(set(bc.POD_COUNTS))]
    for t, p in contents:
        inv.plan(gang_of(f"w-{t}-{p}", p, t), held=held)
    print(f"  {len(contents)} gang contents decided once: "
          f"{time.perf_counter() - started:.1f} s; RSS growth {rss_mib() - base:.0f} MiB")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
