"""fitcore against the upstream allocator (kube-scheduler's own code), side by side.

    .venv/bin/python -m bench.compare [--repeat N] [--nodes 1000] [--json PATH]
                                      [--groups typical,adversarial,gang]

Same inputs, three groups:
- typical per-node questions (GPUs + NICs on PCIe roots, MIG-style counters, consumable
  capacity);
- adversarial per-node questions (N requested where N-1 match, 64 interchangeable
  devices under an impossible matchAttribute, a value group one device short);
- the same gang on 1,000 realistic nodes (bench.realistic's cluster: unique attributes,
  random allocations, three GPU models, MIG nodes), fitcore through an Inventory, cold
  (first decision after loading) and warm;
- a 64-pod gang on 1,000 nodes: the scheduler's way (the oracle allocates pod by pod,
  carrying allocations forward; per pod it filters nodes as kube-scheduler does, until it
  has the adaptive percentageOfNodesToScore's number of feasible nodes — and, as a lower
  bound, stopping at the first node that fits) against fitcore's one gang decision
  (`plan.plan` on a prepared snapshot, which also honours the rack topology the oracle
  ignores).

Per-node times are medians of one decision: for fitcore a whole `api.allocate` call on a
parsed inventory, in five columns (`bench.alloc.fitcore_times`): the same question asked
again; a new pod of a known template on a changed cluster (fresh claim and
allocated-state objects: the kept compiled problem takes the new state) — the question a
scheduler asks node after node and pod after pod; and a new template (claims of a content
never asked on the node, differing in a toleration of a taint no device has: the claims
are walked anew with slice-level caches warm, and share the problem compiled for the
first such template, see bench.alloc.fitcore_times); new request names (the requests
renamed on every call: a template of new names, which shares the arrays compiled for the
first such template); and a new problem compiled (the same, with the node's problems by
walk key emptied before each call, outside the timer: a template whose candidacy the node
has never seen). For upstream the `Allocate` call alone, timed inside the oracle (the
allocator is built outside the timer, as the scheduler builds it in PreFilter; it has no
state across calls, so every call is a new question to it). When upstream hits its filter
timeout the time is a lower bound (">"). Writes the table as JSON (default
bench/results/compare.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import alloc as per_node
from bench import gang as gang_bench
from bench import realistic as realistic_bench
from bench.oracle import oracle as oracle_client
from fitcore import (
    _alloc,  # noqa: F401  (fail loudly when the extension is not built)
    api,
    gang,
    kube,
    plan,
    workload,
)
from tests.fitcore import builders as b

G, ROOT = per_node.G, per_node.ROOT
TIMEOUT_MS = 5_000
REALISTIC_PODS = 64


def shared_capacity() -> list[dict[str, Any]]:
    cap = {"memory": {"value": "80Gi", "requestPolicy": {
        "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}
    return [b.rslice("s", [b.device(f"gpu-{i}", capacity=cap, multi=True) for i in range(4)])]


def one_short(n: int) -> list[dict[str, Any]]:
    return [b.rslice("s", [b.device(f"d{i}") for i in range(n - 1)])]


PROFILE = f"device.attributes['{G}'].profile == '2g.20gb'"
Case = tuple[str, str, Callable[[], list[dict[str, Any]]], list[dict[str, Any]],
             list[dict[str, Any]]]
CASES: list[Case] = [
    ("typical", "2 GPUs + NIC on one PCIe root", per_node.gpu_nic_node,
     [b.claim("c", b.req("g", count=2), b.req("n", "nic"), match=ROOT)], []),
    ("typical", "1 GPU of 8", per_node.gpu_nic_node, [b.claim("c", b.req("g"))], []),
    ("typical", "3 MIG partitions of one GPU", per_node.mig_node,
     [b.claim("c", b.req("m", count=3, selectors=(PROFILE,)), match=f"{G}/parent")], []),
    ("typical", "consumable capacity: 30Gi share", shared_capacity,
     [b.claim("c", b.req("g", capacity={"memory": "30Gi"}))],
     [b.allocated(f"x{i}", (G, "n1", "gpu-0"), shares={"memory": "40Gi"}) for i in range(2)]),
    ("adversarial", "24 requested, 23 match", lambda: one_short(24),
     [b.claim("c", b.req("g", count=24))], []),
    ("adversarial", "64 interchangeable, 32 on one of 3 roots", lambda: per_node.identical(64, 3),
     [b.claim("c", b.req("g", count=32), match=ROOT)], []),
    ("adversarial", "17 on one root, 4 roots of 16", lambda: per_node.identical(64, 4),
     [b.claim("c", b.req("g", count=17), match=ROOT)], []),
]


def node_case(slices: list[dict[str, Any]], claims: list[dict[str, Any]],
              allocated: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    return {"mode": "node", "node": b.node(), "slices": slices,
            "classes": [b.gpu_class(), b.nic_class()], "allocated": allocated,
            "claims": claims, "repeat": repeat, "timeout_ms": TIMEOUT_MS}


def median(fn: Callable[[], Any], repeat: int, budget_s: float = 5.0) -> float:
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return statistics.median(times)


def per_node_rows(oracle: oracle_client.Oracle, repeat: int,
                  groups: tuple[str, ...] = ("typical", "adversarial")) -> list[dict[str, Any]]:
    rows = []
    for group, name, layout, claims_json, allocated in CASES:
        if group not in groups:
            continue
        slices = layout()
        inventory = kube.inventory(slices, [b.gpu_class(), b.nic_class()], allocated)
        node = kube.node(b.node())
        claims = [kube.resource_claim(c) for c in claims_json]
        ours = api.allocate(node, inventory, claims)
        times = per_node.fitcore_times(inventory, allocated, claims_json, repeat)
        answer = oracle.ask(node_case(slices, claims_json, allocated, repeat),
                            timeout=repeat * TIMEOUT_MS / 1000 + 60)
        timed_out = bool(answer.get("timeout"))
        if not timed_out:
            assert bool(answer["fits"]) == ours.fits, (name, ours, answer)
        rows.append({"group": group, "case": name, "verdict": ours.verdict,
                     "fitcore_ms": times["again"] * 1e3, "fitcore_new_ms": times["new_pod"] * 1e3,
                     "fitcore_template_ms": times["new_template"] * 1e3,
                     "fitcore_content_ms": times["new_content"] * 1e3,
                     "fitcore_compiled_ms": times["compiled"] * 1e3,
                     "upstream_ms": answer["nanos"] / 1e6, "upstream_timed_out": timed_out})
    return rows


def gang_rows(oracle: oracle_client.Oracle, nodes: int, repeat: int) -> list[dict[str, Any]]:
    objects = gang_bench.cluster(nodes, busy_racks=False)
    gang_objects = gang_bench.gang_objects()
    bundle = workload.load([(o, None) for o in [*objects, *gang_objects]])
    snapshot = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used)
    g = bundle.gangs[0]
    result = plan.plan(g, snapshot, [])
    seconds = median(lambda: plan.plan(g, snapshot, []), repeat, budget_s=20.0)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    template = next(o for o in gang_objects if o["kind"] == "ResourceClaimTemplate")
    pods = [{"name": f"worker-{i}", "claims": [{
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"worker-{i}-gpus", "namespace": "default"},
        "spec": template["spec"]["spec"]}]} for i in range(gang_bench.PODS)]
    rows = []
    for how, label in (("scheduler", "scheduler's filtering"), ("first", "first fit")):
        case = {"mode": "gang", "nodes": by_kind["Node"], "slices": by_kind["ResourceSlice"],
                "classes": by_kind["DeviceClass"], "allocated": by_kind.get("ResourceClaim", []),
                "pods": pods, "timeout_ms": TIMEOUT_MS, "filter": how}
        answer = oracle.ask(case, timeout=3600)
        rows.append({"group": "gang", "case": f"{gang_bench.PODS} pods, {nodes} nodes: {label}",
                     "verdict": result.verdict, "fitcore_ms": seconds * 1e3,
                     "upstream_ms": answer["nanos"] / 1e6,
                     "upstream_timed_out": False, "upstream_placed": answer["placed"],
                     "upstream_calls": answer["calls"]})
    return rows


def realistic_rows(oracle: oracle_client.Oracle, nodes: int, repeat: int
                   ) -> list[dict[str, Any]]:
    """The 64-pod gang on the realistic cluster of bench.realistic (unique attributes,
    random allocations, three GPU models, MIG nodes, bound pods), answered by an
    Inventory (cold: first decision after loading; warm: again) and the scheduler's way
    by the oracle (devices only: it does not count cpu, memory or bound pods)."""
    objects = list(realistic_bench.objects(nodes))
    g = realistic_bench.gang_for(REALISTIC_PODS, "fit")
    inv, _, _ = realistic_bench.load(nodes)
    cold, result = realistic_bench.timed(lambda: inv.fit(g))
    warm = median(lambda: inv.fit(g), repeat, budget_s=20.0)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    template = realistic_bench.TEMPLATES[("team", "h100-root")]
    pods = [{"name": f"worker-{i}", "claims": [{
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"worker-{i}-devices", "namespace": "team"},
        "spec": template["spec"]["spec"]}]} for i in range(REALISTIC_PODS)]
    case = {"mode": "gang", "nodes": by_kind["Node"], "slices": by_kind["ResourceSlice"],
            "classes": by_kind["DeviceClass"], "allocated": by_kind.get("ResourceClaim", []),
            "pods": pods, "timeout_ms": TIMEOUT_MS, "filter": "scheduler"}
    answer = oracle.ask(case, timeout=3600)
    label = f"{REALISTIC_PODS} pods, {nodes} realistic nodes"
    return [{"group": "gang", "case": f"{label}: warm", "verdict": result.verdict,
             "fitcore_ms": warm * 1e3, "upstream_ms": answer["nanos"] / 1e6,
             "upstream_timed_out": False, "upstream_placed": answer["placed"],
             "upstream_calls": answer["calls"], "pods": REALISTIC_PODS},
            {"group": "gang", "case": f"{label}: cold", "verdict": result.verdict,
             "fitcore_ms": cold * 1e3, "upstream_ms": answer["nanos"] / 1e6,
             "upstream_timed_out": False, "upstream_placed": answer["placed"],
             "upstream_calls": answer["calls"], "pods": REALISTIC_PODS}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--json", default=os.path.join("bench", "results", "compare.json"))
    parser.add_argument("--groups", default="typical,adversarial,gang",
                        help="which groups of rows to run (comma-separated; the adversarial "
                             "rows wait out upstream's timeouts, the gang rows load 1,000 "
                             "nodes)")
    args = parser.parse_args()
    groups = tuple(args.groups.split(","))
    with oracle_client.Oracle.start() as oracle:
        rows = per_node_rows(oracle, args.repeat, groups)
        if "gang" in groups:
            rows += gang_rows(oracle, args.nodes, max(3, args.repeat // 4))
            rows += realistic_rows(oracle, args.nodes, max(3, args.repeat // 4))
    print("fitcore ms, and how many times faster than upstream: asked again / a new pod of "
          "a known template / a new template / new request names / a new problem compiled "
          "(see bench.alloc.fitcore_times)")
    print(f"{'group':12} {'case':42} {'verdict':8} {'fitcore ms':>42} {'upstream ms':>12} "
          f"{'faster':>48}")
    for r in rows:
        lo = ">" if r["upstream_timed_out"] else ""
        up = r["upstream_ms"]
        if r["group"] == "gang":  # one gang decision; the per-node columns do not apply
            ours, ratios = f"{r['fitcore_ms']:6.3f}", f"{up / r['fitcore_ms']:.1f}x"
        else:
            columns = ("fitcore_ms", "fitcore_new_ms", "fitcore_template_ms",
                       "fitcore_content_ms", "fitcore_compiled_ms")
            ours = " / ".join(f"{r[k]:6.3f}" for k in columns)
            ratios = " / ".join(f"{lo}{up / r[k]:.1f}x" for k in columns)
        print(f"{r['group']:12} {r['case']:42} {r['verdict']:8} {ours:>42} "
              f"{lo:>1}{up:11.3f} {ratios:>48}")
    for r in (r for r in rows if r["group"] == "gang"):
        print(f"upstream, {r['case']}: {r['upstream_calls']} Allocate calls, "
              f"{r['upstream_placed']} of {r.get('pods', gang_bench.PODS)} pods placed "
              "(topology, cpu and memory ignored)")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(rows, fh, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
