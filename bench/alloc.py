"""Per-node allocation: the compiled core against the reference, on standard layouts.

    .venv/bin/python -m bench.alloc [--repeat N] [--json PATH]

For each layout and claim it prints median times and ratios of:
- a whole `api.allocate` call on each engine (see `fitcore_times` for the three ways a
  question can come to the compiled core: asked again, a new pod of a known template, a
  new template);
- the search alone, on the same prepared problem (the compiled core vs the reference).
The reference gets a step budget; when it runs out, its time is a lower bound (">").
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from fitcore import (
    _alloc,
    api,
    cache,
    compiled,
    kube,
    model,
    reference,
)
from tests.fitcore import builders as b

G, N = b.GPU, b.NIC
ROOT = "resource.kubernetes.io/pcieRoot"
REF_BUDGET = 200_000


def gpu_nic_node() -> list[dict[str, Any]]:
    gpus = [b.device(f"gpu-{i}", index=i, **{ROOT: f"pci{i // 2}"}) for i in range(8)]
    nics = [b.device(f"nic-{r}", **{ROOT: f"pci{r}"}) for r in range(4)]
    return [b.rslice("gpus", gpus), b.rslice("nics", nics, driver=N)]


def identical(n: int, groups: int) -> list[dict[str, Any]]:
    per = -(-n // groups)
    return [b.rslice("s", [b.device(f"d{i}", **{ROOT: f"pci{i // per}"}) for i in range(n)])]


def mig_node() -> list[dict[str, Any]]:
    slices = []
    for g in range(2):
        parts = [b.device(f"gpu-{g}-p{j}", counters=[{"counterSet": f"gpu-{g}", "counters": {
            "memory": {"value": "20Gi"}, "sm": {"value": "2"}}}], profile="2g.20gb", parent=g)
            for j in range(7)]
        parts.append(b.device(f"gpu-{g}-full", counters=[{"counterSet": f"gpu-{g}", "counters": {
            "memory": {"value": "80Gi"}, "sm": {"value": "7"}}}], profile="full", parent=g))
        slices.append(b.rslice(f"dev-{g}", parts, pool=f"gpu-{g}", count=2))
        slices.append(b.counter_slice(f"ctr-{g}", {f"gpu-{g}": {"memory": "80Gi", "sm": "7"}},
                                      pool=f"gpu-{g}"))
    return slices


PROFILE = f"device.attributes['{G}'].profile == '2g.20gb'"
CASES: list[tuple[str, Callable[[], list[dict[str, Any]]], dict[str, Any], str]] = [
    ("8gpu+nic: 2 GPUs + NIC on one root", gpu_nic_node,
     b.claim("c", b.req("g", count=2), b.req("n", "nic"), match=ROOT), "fits"),
    ("8gpu+nic: 3 GPUs + NIC on one root", gpu_nic_node,
     b.claim("c", b.req("g", count=3), b.req("n", "nic"), match=ROOT), "no-fit"),
    ("64 identical: 32 devices", lambda: identical(64, 1),
     b.claim("c", b.req("g", count=32)), "fits"),
    ("64 identical: 32 on one root (2 roots)", lambda: identical(64, 2),
     b.claim("c", b.req("g", count=32), match=ROOT), "fits"),
    ("64 identical: 32 on one root (3 roots)", lambda: identical(64, 3),
     b.claim("c", b.req("g", count=32), match=ROOT), "no-fit"),
    ("MIG counters: 3 partitions of one GPU", mig_node,
     b.claim("c", b.req("m", count=3, selectors=(PROFILE,)), match=f"{G}/parent"), "fits"),
    ("MIG counters: 4 partitions of one GPU", mig_node,
     b.claim("c", b.req("m", count=4, selectors=(PROFILE,)), match=f"{G}/parent"), "no-fit"),
]


def median_seconds(fn: Callable[[], Any], repeat: int, budget_s: float = 3.0) -> float:
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return statistics.median(times)


def run(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, layout, claim_json, expected in CASES:
        inventory = kube.inventory(layout(), [b.gpu_class(), b.nic_class()], [])
        node = kube.node(b.node())
        claims = [kube.resource_claim(claim_json)]
        c_fit = api.allocate(node, inventory, claims, engine="c")
        py_fit = api.allocate(node, inventory, claims, engine="py", budget=REF_BUDGET)
        assert c_fit.verdict == expected, (name, c_fit)
        times = fitcore_times(inventory, [], [claim_json], repeat)
        full_py = median_seconds(lambda: api.allocate(node, inventory, claims, engine="py",
                                                      budget=REF_BUDGET), repeat)
        prepared = reference.prepare(node, inventory, claims)
        problem = compiled.Problem(prepared)
        native = _alloc.Compiled(problem.packed, problem.header)
        state = problem.state(inventory.allocated)
        search_c = median_seconds(lambda: _alloc.search(native, state, api.DEFAULT_BUDGET),
                                  repeat)

        def ref_search() -> None:
            with contextlib.suppress(reference.BudgetExceeded):
                reference._Search(prepared, REF_BUDGET).claim(0)
        search_py = median_seconds(ref_search, repeat)
        rows.append({"case": name, "verdict": c_fit.verdict,
                     "reference_undecided": py_fit.verdict == "undecided",
                     "c_ms": times["again"] * 1e3, "c_new_ms": times["new_pod"] * 1e3,
                     "c_template_ms": times["new_template"] * 1e3, "py_ms": full_py * 1e3,
                     "c_search_ms": search_c * 1e3, "py_search_ms": search_py * 1e3,
                     "steps_c": c_fit.steps, "steps_py": py_fit.steps})
    return rows


def fitcore_times(inventory: model.Inventory, allocated_json: list[dict[str, Any]],
                  claims_json: list[dict[str, Any]], repeat: int,
                  budget_s: float = 5.0) -> dict[str, float]:
    """Median seconds of a whole `api.allocate` call on the compiled core (the inventory's
    slices parsed and their caches warm), for the question asked three ways:

    - "again": the same claim and allocated-state objects (the state is remembered too);
    - "new_pod": fresh claim objects of a content asked before on this node and a fresh
      allocated-state object, every call — a new pod of a known template on a cluster
      whose allocations changed (the state is applied to the kept compiled problem);
    - "new_template": claims of a content never asked on this node (each call adds a
      toleration of a taint nobody has, which changes nothing but the content): the
      content key misses, and the claims' candidacy is walked anew. Reused: pools, CEL
      results per device and, for claims of the common form, the same results grouped
      per node as bitsets (compiled.NodeArrays: the devices a selector list selects,
      those a capacity request can serve), keyed by the selector expressions and the
      requested amounts, not by tolerations, which are applied on every walk; so this
      column measures selectors warm, and a template with a selector list never seen on
      the node pays one evaluation per device of it, once per node. The walk's key
      (candidacy, counts, result names, capacity takes) is the first template's, so
      that template's compiled problem is shared (found, walked and kept in one call of
      the compiled core, `compiled.kept`; compiled.Problem.common_or_same after it):
      device classes, lists and the packed buffer are not rebuilt. A template with other
      request names or another candidacy compiles its own problem.
    - "new_content": claims whose requests are renamed on every call (and the constraints
      naming them): a template of new names. The walk's key holds no names, so the
      compiled arrays of the first such template are shared
      (compiled.Problem.renamed); alternatives, result names and results are the
      claims' own.
    - "compiled": the same renamed claims, with the node's problems by walk key
      (compiled.NodeArrays.same) emptied before each call, outside the timer: a problem
      is compiled (alternatives, device classes, lists, packed buffer), the cost of a
      template whose candidacy the node has never seen (selectors still warm).
    Claims are parsed outside the timer, as the oracle decodes its JSON outside its timer.
    """
    node = kube.node(b.node())
    claims = [kube.resource_claim(c) for c in claims_json]
    api.allocate(node, inventory, claims)
    again = median_seconds(lambda: api.allocate(node, inventory, claims), repeat, budget_s)

    def state() -> model.Inventory:
        allocated = kube.inventory([], [], allocated_json).allocated
        return model.Inventory(inventory.slices, inventory.classes, allocated)

    def ask(question: tuple[model.Inventory, list[model.Claim]]) -> model.NodeFit:
        return api.allocate(node, *question)

    pods = iter([(state(), [kube.resource_claim(c) for c in claims_json])
                 for _ in range(repeat)])
    new_pod = median_seconds(lambda: ask(next(pods)), repeat, budget_s)
    templates = iter([(state(), [kube.resource_claim(_tolerating(c, f"t{_serial()}"))
                                 for c in claims_json]) for _ in range(repeat)])
    new_template = median_seconds(lambda: ask(next(templates)), repeat, budget_s)
    contents = iter([(state(), [kube.resource_claim(_renamed(c, f"n{_serial()}"))
                                for c in claims_json]) for _ in range(repeat)])
    new_content = median_seconds(lambda: ask(next(contents)), repeat, budget_s)
    same = compiled.NodeArrays.of(cache.for_slices(inventory.slices).devices_for(node)).same
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(repeat):
        question = (state(), [kube.resource_claim(_renamed(c, f"n{_serial()}"))
                              for c in claims_json])
        same.clear()
        start = time.perf_counter()
        ask(question)
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return {"again": again, "new_pod": new_pod, "new_template": new_template,
            "new_content": new_content, "compiled": statistics.median(times)}


_serials = iter(range(1 << 62))


def _serial() -> int:
    return next(_serials)


def _tolerating(claim_json: dict[str, Any], key: str) -> dict[str, Any]:
    """The claim with every request tolerating a taint `bench.fitgate.dev/<key>`."""
    out = copy.deepcopy(claim_json)
    toleration = {"key": f"bench.fitgate.dev/{key}", "operator": "Exists"}
    for request in out["spec"]["devices"]["requests"]:
        for exact in [request["exactly"]] if "exactly" in request else \
                request["firstAvailable"]:
            exact.setdefault("tolerations", []).append(toleration)
    return out


def _renamed(claim_json: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The claim with every request named `<name>-<suffix>`, and the constraints and
    configs that name requests (`<name>` or `<name>/<subrequest>`) following them."""
    out = copy.deepcopy(claim_json)
    devices = out["spec"]["devices"]
    names = {r["name"]: f"{r['name']}-{suffix}" for r in devices["requests"]}
    for request in devices["requests"]:
        request["name"] = names[request["name"]]

    def rename(ref: str) -> str:
        head, sep, sub = ref.partition("/")
        return names.get(head, head) + sep + sub
    for entry in [*devices.get("constraints", []), *devices.get("config", [])]:
        if "requests" in entry:
            entry["requests"] = [rename(ref) for ref in entry["requests"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args()
    rows = run(args.repeat)
    print("c ms: compiled core, whole call (again / new pod of a known template / new "
          "template); py ms: reference, whole call")
    head = (f"{'case':42} {'verdict':7} {'c ms':>22} {'py ms':>9} {'ratio':>8} "
            f"{'c search':>9} {'py search':>10} {'ratio':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        lower = ">" if r["reference_undecided"] else " "
        print(f"{r['case']:42} {r['verdict']:7} {r['c_ms']:6.3f} / {r['c_new_ms']:5.3f} / "
              f"{r['c_template_ms']:5.3f} "
              f"{lower}{r['py_ms']:8.2f} "
              f"{lower}{r['py_ms'] / r['c_ms']:6.1f}x {r['c_search_ms']:9.4f} "
              f"{lower}{r['py_search_ms']:9.3f} "
              f"{lower}{r['py_search_ms'] / r['c_search_ms']:9.0f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
