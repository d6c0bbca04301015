"""Loading an offline inventory the way `fitgate fit` does, from YAML and from JSON.

    .venv/bin/python -m bench.load [--sizes 1000,5000] [--repeat N]

Writes a realistic cluster (`tests/gang/realistic.py`, seed 1: unique device attributes,
uneven allocations, mixed node types) as one `kind: List` file in YAML and in JSON (as
`kubectl get -o yaml|json` prints it) into a temporary directory, with a workload file
beside it, and times `admission.app.offline.load_inventory` on each: parsing, limits, strict
fields, conversion and the Inventory. Prints the readers in use, and the median
wall-clock seconds (and process CPU seconds, steadier on a shared machine) of `--repeat`
loads. Generated files are removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import tempfile
import time
from typing import Any

import yaml

from admission.app import offline
from tests.gang import realistic as rl

SEED = 1


def write(directory: pathlib.Path, nodes: int) -> dict[str, pathlib.Path]:
    rng = random.Random(SEED)
    items: list[dict[str, Any]] = list(rl.classes())
    for i in range(nodes):
        items.extend(rl.node_objects(rng, i))
    listed = {"apiVersion": "v1", "kind": "List", "items": items}
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    paths = {"yaml": directory / f"inventory-{nodes}.yaml",
             "json": directory / f"inventory-{nodes}.json"}
    paths["yaml"].write_text(yaml.dump(listed, Dumper=dumper, sort_keys=False))
    paths["json"].write_text(json.dumps(listed, indent=2))
    wl = directory / "workload.yaml"
    if not wl.exists():
        wl.write_text(yaml.safe_dump_all([rl.template(), rl.workload(8)], sort_keys=False))
    return paths


def time_load(path: pathlib.Path, workload: pathlib.Path) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    offline.load_inventory([str(path)], [], str(workload))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from fitcore import read
    print("readers: " + ("YAML fitcore._load (libyaml events), JSON orjson"
                         if read.compiled is not None else
                         "YAML PyYAML (FITCORE_NO_EXTENSIONS=1), JSON json"))
    heading = f"load s (cpu s), median of {args.repeat}"
    print(f"{'nodes':>6} {'format':>6} {'MiB':>6} {heading:>30}")
    with tempfile.TemporaryDirectory(prefix="fitgate-bench-load-") as tmp:
        directory = pathlib.Path(tmp)
        for nodes in (int(s) for s in args.sizes.split(",")):
            paths = write(directory, nodes)
            for fmt, path in paths.items():
                runs = [time_load(path, directory / "workload.yaml") for _ in range(args.repeat)]
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                mib = path.stat().st_size / (1024 * 1024)
                print(f"{nodes:>6} {fmt:>6} {mib:>6.1f} {wall:>22.2f} ({cpu:.2f})", flush=True)
            for path in paths.values():
                path.unlink()


if __name__ == "__main__":
    main()
