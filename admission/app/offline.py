"""`fitgate fit` and `fitgate verify`: the decisions, offline, from files.

`fitgate fit` answers offline what the admission check answers in the cluster: given an
inventory (Nodes, ResourceSlices, DeviceClasses, allocated ResourceClaims, bound Pods),
optional NodeShapes and a workload (a Kueue Workload or a Job, with its
ResourceClaimTemplates), does the gang fit now, and if not, which new nodes would make it
fit. Inputs are YAML or JSON files (multi-document allowed) or directories of them.

Exit status: 0 for any verdict; 2 for bad input, with a message naming the file, the
object and the field.

Reading is fast enough for real clusters: `.json` files (and any file that starts with
`{` or `[`) go through orjson, one object per file (a `kind: List`, as `kubectl get -o
json` prints, is flattened); YAML, read as YAML 1.1 as Kubernetes reads it, through
libyaml's C parser and fitcore's compiled builder (`fitcore.load_yaml`). `fit` feeds
the objects to a `fitcore.inventory.Inventory` one by one, dropping each as it goes, so
that the raw objects and the parsed inventory are not all held at once.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import pathlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml

import fitcore

_SUFFIXES = (".yaml", ".yml", ".json")
_GANG_KINDS = ("Workload", "Job")


class UsageError(Exception):
    """Bad input that is not about one object's field (a missing file, broken YAML)."""


# ---------------------------------------------------------------------- reading


def _files(path: pathlib.Path) -> Iterator[pathlib.Path]:
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _SUFFIXES)
        if not found:
            raise UsageError(f"{path}: directory holds no .yaml, .yml or .json files")
        yield from found
    elif path.is_file():
        yield path
    else:
        raise UsageError(f"{path}: no such file or directory")


def read_documents(paths: Sequence[str]) -> list[fitcore.Document]:
    """Every object in the given files and directories, with the file it came from."""
    out: list[fitcore.Document] = []
    for raw in paths:
        for path in _files(pathlib.Path(raw)):
            try:
                data = path.read_bytes()
                docs = _parse(data, path)
                del data
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"{path}: cannot read: {exc}") from exc
            except fitcore.LimitError as exc:
                raise UsageError(f"{path}: refused: {exc}") from exc
            except yaml.YAMLError as exc:
                raise UsageError(f"{path}: not valid YAML or JSON: {exc}") from exc
            for i, doc in enumerate(docs):
                if doc is None:
                    continue
                if not isinstance(doc, Mapping):
                    raise UsageError(f"{path}: document {i + 1} is a {type(doc).__name__}, "
                                     "not a Kubernetes object")
                out.extend(fitcore.flatten(doc, str(path)))  # a List's items
            del docs
    return out


def _parse(data: bytes, path: pathlib.Path) -> list[Any]:
    """The documents of one file: JSON when it looks like JSON (one value), else YAML;
    both within fitcore.read's size and depth limits, duplicate keys refused. The
    readers take the file's bytes (UTF-8; UnicodeDecodeError otherwise): orjson and
    libyaml read UTF-8 themselves, so the file is not decoded and encoded again."""
    head = data.lstrip()[:1]
    if path.suffix == ".json" or head in (b"{", b"["):
        try:
            return fitcore.load_json(data)
        except ValueError as exc:
            if isinstance(exc, (fitcore.LimitError, UnicodeDecodeError)):
                raise
            # several JSON documents, or YAML after all: the YAML reader says
    return fitcore.load_yaml(data)


# ------------------------------------------------------------------------ fit


_TEMPLATE_KINDS = ("ResourceClaimTemplate",)


def load_inventory(inventory_paths: Sequence[str], shape_paths: Sequence[str],
                   workload_path: str, *, lenient: bool = False,
                   kube_version: str = fitcore.DEFAULT_KUBE_VERSION,
                   notes: list[str] | None = None, progress: fitcore.Progress | None = None
                   ) -> tuple[fitcore.Gang, fitcore.Inventory]:
    """The gang of the --workload file, and an Inventory fed the inventory and shapes.

    Every object is read as the API server hands it to the scheduler (fitcore.read:
    strict fields, or warnings when `lenient`; v1beta1/v1beta2 converted to v1;
    defaults), then applied to the Inventory one by one, each dropped as it goes. Objects
    of other APIs are skipped and counted in `notes`. Every bad object is reported (with
    its file), not only the first. Workloads and Jobs in the inventory are other
    tenants' (their pods count, as Pods): only the --workload file names the gang. A load
    over a second reports its progress on stderr (`progress`: fitcore.Progress)."""
    # The objects read and parsed here live until the process ends: collecting garbage
    # while they pile up would walk them again and again (a third of the time on 5,000
    # nodes). Freeze what is loaded instead.
    gc.disable()
    try:
        return _load_inventory(inventory_paths, shape_paths, workload_path, lenient,
                               kube_version, notes, progress or fitcore.Progress(sys.stderr.write))
    finally:
        gc.freeze()
        gc.enable()


def _load_inventory(inventory_paths: Sequence[str], shape_paths: Sequence[str],
                    workload_path: str, lenient: bool, kube_version: str,
                    notes: list[str] | None, progress: fitcore.Progress
                    ) -> tuple[fitcore.Gang, fitcore.Inventory]:
    inv = fitcore.Inventory(kube_version=kube_version)
    problems: list[fitcore.FieldError] = []
    found = fitcore.Bundle()  # only its skipped counts and warnings: the notes
    names: collections.Counter[str] = collections.Counter()
    templates: dict[tuple[str, str], Mapping[str, Any]] = {}
    claims: dict[tuple[str, str], Mapping[str, Any]] = {}
    docs = read_documents(inventory_paths) + read_documents(shape_paths)
    wl_docs = read_documents([workload_path])
    docs += [d for d in wl_docs if _kind(d[0]) not in _GANG_KINDS]
    gang_docs = [d for d in wl_docs if _kind(d[0]) in _GANG_KINDS]
    docs.reverse()  # popped from the end: in file order, each dropped once applied
    progress.total = len(docs)
    got = None  # one Sorted for every object, emptied as it goes (skipped counts kept)
    while docs:
        progress.step(progress.total - len(docs))
        raw, source = docs.pop()
        if _kind(raw) in _GANG_KINDS:
            continue
        got = fitcore.read_one(raw, source, lenient=lenient, names=names, into=got)
        if got.problems:
            problems.extend(got.problems)
            got.problems.clear()
        if got.warnings:
            found.warnings.extend(got.warnings)
            got.warnings.clear()
        for obj, _ in got.objects:
            kind = obj["kind"]
            if kind in _TEMPLATE_KINDS or kind == "ResourceClaim":
                (templates if kind in _TEMPLATE_KINDS else claims)[_key(obj)] = obj
                if kind in _TEMPLATE_KINDS:
                    continue
            try:
                found.warnings.extend(inv.apply("ADDED", obj, read=False))
            except fitcore.InputError as exc:
                problems.extend(e if e.source else dataclasses.replace(e, source=source)
                                for e in exc.errors)
        got.objects.clear()
    for k, n in (got.skipped.items() if got is not None else ()):
        found.skipped[k] = found.skipped.get(k, 0) + n
    found.warnings.extend(inv.notes())
    if notes is not None:
        notes.extend(found.notes())
    if len(gang_docs) != 1:
        listed = ", ".join(f"{o.get('kind')} {_key(o)[0]}/{_key(o)[1]}"
                           for o, _ in gang_docs) or "none"
        if problems:
            raise fitcore.InputError(problems)
        raise UsageError(f"{workload_path}: must hold exactly one Workload or Job, found "
                         f"{listed}")
    got = fitcore.read_one(gang_docs[0][0], gang_docs[0][1], lenient=lenient, names=names)
    problems.extend(got.problems)
    if notes is not None:
        notes.extend(got.warnings)
    g = None
    if got.objects:
        obj, source = got.objects[0]
        try:
            g = fitcore.gang_of(obj, templates, claims, source)
        except fitcore.InputError as exc:
            problems.extend(exc.errors)
    if problems or g is None:
        raise fitcore.InputError(problems)
    if not inv.nodes() and not inv.shapes():
        raise UsageError(f"{', '.join(inventory_paths)}: holds no Node, and there are no "
                         "NodeShapes: there is nothing to place the gang on")
    return g, inv


def _kind(obj: Any) -> Any:
    return obj.get("kind") if type(obj) is dict or isinstance(obj, Mapping) else None


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def run_fit(inventory_paths: Sequence[str], shape_paths: Sequence[str], workload_path: str,
            *, lenient: bool = False, kube_version: str = fitcore.DEFAULT_KUBE_VERSION,
            notes: list[str] | None = None) -> tuple[fitcore.Gang, fitcore.PlanResult]:
    """Plan the gang on an Inventory of the files (`load_inventory`). `notes` receives
    what the reader skipped or ignored (for stderr)."""
    g, inv = load_inventory(inventory_paths, shape_paths, workload_path, lenient=lenient,
                            kube_version=kube_version, notes=notes)
    return g, inv.plan(g)


def run_verify(before: Sequence[str], after: Sequence[str], shape_paths: Sequence[str],
               workload_path: str, *, lenient: bool = False,
               kube_version: str = fitcore.DEFAULT_KUBE_VERSION
               ) -> tuple[fitcore.Gang, fitcore.PlanResult, fitcore.VerifyResult | None]:
    """Plan on the inventory before provisioning, then verify on the one after."""
    g, inv = load_inventory(before, shape_paths, workload_path, lenient=lenient,
                            kube_version=kube_version)
    planned = inv.plan(g)
    if planned.plan is None:
        return g, planned, None
    g_after, inv_after = load_inventory(after, shape_paths, workload_path, lenient=lenient,
                                        kube_version=kube_version)
    return g, planned, inv_after.verify(g_after, planned.plan)


def verify_json(planned: fitcore.PlanResult, verified: fitcore.VerifyResult | None
                ) -> dict[str, Any]:
    if verified is None:
        return {"verdict": "no-plan", "planVerdict": planned.verdict, "category": None,
                "plan": None, "mismatches": [], "placements": [],
                "reasons": ["the gang needed no new nodes before" if planned.verdict == "fits"
                            else "there was no plan to verify", *planned.reasons]}
    assert planned.plan is not None
    return {"verdict": verified.verdict, "planVerdict": planned.verdict,
            "category": verified.category, "plan": _plan_json(planned.plan),
            "mismatches": list(verified.mismatches),
            "placements": [{"podSet": p.pod_set, "index": p.index, "node": p.node,
                            "devices": _devices(p)} for p in verified.placements],
            "reasons": list(verified.reasons),
            "details": [d.as_dict() for d in verified.details]}


def verify_text(g: fitcore.Gang, planned: fitcore.PlanResult, verified: fitcore.VerifyResult | None
                ) -> str:
    if verified is None:
        return (f"{g.label}: nothing to verify: " +
                ("it fits existing nodes" if planned.verdict == "fits" else
                 f"no plan ({planned.verdict})"))
    assert planned.plan is not None
    headline = {"fits": "the new nodes keep the plan's promise; the gang fits",
                "misfit": "the gang does not fit the new nodes (coordination)",
                "undecided": "undecided"}[verified.verdict]
    lines = [f"{g.label}: {headline}", f"plan: {_plan_text(planned.plan)}"]
    if verified.mismatches:
        lines.append("how the new nodes differ from their shapes:")
        lines.extend(f"  - {m}" for m in verified.mismatches)
    if verified.placements:
        lines.append("placements:")
        lines.extend(f"  {p.pod_set}[{p.index}] -> {p.node}" for p in verified.placements)
    if verified.reasons:
        lines.append("why:")
        lines.extend(f"  - {r}" for r in verified.reasons)
    return "\n".join(lines)


def _devices(p: fitcore.Placement) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for claim, results in p.devices:
        per_request = out.setdefault(claim, {})
        for r in results:
            per_request.setdefault(r.request or "*", []).append(str(r.id))
    return out


def _plan_json(p: fitcore.Plan) -> dict[str, Any]:
    return {"shapes": [{"shape": s.shape, "count": s.count, "domain": s.domain}
                       for s in p.shapes],
            "price": fitcore.price_str(p.price)}


def _pod_sets(g: fitcore.Gang, result: fitcore.PlanResult) -> list[dict[str, Any]]:
    """Per pod set: how many pods were placed (fewer than count only with minCount) and
    in which topology domain."""
    placements = result.placements or (result.plan.placements if result.plan else ())
    domains = result.domains or (result.plan.domains if result.plan else {})
    placed: dict[str, int] = {}
    for p in placements:
        placed[p.pod_set] = placed.get(p.pod_set, 0) + 1
    return [{"name": ps.name, "count": ps.count, "minCount": ps.min_count,
             "placed": placed.get(ps.name, 0), "topology": ps.topology,
             "domain": domains.get(ps.name)} for ps in g.pod_sets]


def as_json(g: fitcore.Gang, result: fitcore.PlanResult) -> dict[str, Any]:
    placements = result.placements or (result.plan.placements if result.plan else ())
    return {
        "verdict": result.verdict,
        "category": result.category,
        "workload": g.label,
        "podSets": _pod_sets(g, result),
        "placements": [{"podSet": p.pod_set, "index": p.index, "node": p.node,
                        "devices": _devices(p)} for p in placements],
        "plan": _plan_json(result.plan) if result.plan else None,
        "alternatives": [_plan_json(a) for a in result.alternatives],
        "rejectedShapes": [{"shape": d.shape, "code": d.code, "category": d.category,
                            "reason": d.message} for d in result.rejected_details],
        "reasons": list(result.reasons),
        "details": [d.as_dict() for d in result.details],
        "stats": {"seconds": round(result.stats.seconds, 6), "nodes": result.stats.nodes,
                  "devices": result.stats.devices, "steps": result.stats.steps},
    }


def _plan_text(p: fitcore.Plan) -> str:
    parts = []
    for s in p.shapes:
        where = f" in new domain {s.domain}" if s.domain else ""
        parts.append(f"{s.count} × {s.shape}{where}")
    return f"{' + '.join(parts)}  (price {fitcore.price_str(p.price)})"


def as_text(g: fitcore.Gang, result: fitcore.PlanResult) -> str:
    headline = {"fits": "fits on existing nodes", "needs-capacity": "needs new nodes",
                "unsatisfiable": "cannot fit", "undecided": "undecided"}[result.verdict]
    lines = [f"{g.label}: {headline}"
             + (f" ({result.category})" if result.verdict == "unsatisfiable" else "")]
    if result.plan:
        lines.append(f"plan: {_plan_text(result.plan)}")
        for alt in result.alternatives:
            lines.append(f"  alternative: {_plan_text(alt)}")
        for name, why in result.rejected:
            lines.append(f"  not {name}: {why}")
    placements = result.placements or (result.plan.placements if result.plan else ())
    for ps in _pod_sets(g, result):
        if ps["domain"] or ps["placed"] < ps["count"]:
            where = f" in {ps['topology']}={ps['domain']}" if ps["domain"] else ""
            lines.append(f"pod set {ps['name']}: {ps['placed']} of {ps['count']} pods{where}")
    if placements:
        lines.append("placements:")
        for p in placements:
            devs = "  ".join(f"{claim}.{req}=" + ",".join(i.rsplit("/", 1)[-1] for i in ids)
                             for claim, reqs in _devices(p).items() for req, ids in reqs.items())
            lines.append(f"  {p.pod_set}[{p.index}] -> {p.node}" + (f"  {devs}" if devs else ""))
    if result.reasons:
        lines.append("why:" if result.verdict != "needs-capacity"
                     else "why existing nodes are not enough:")
        lines.extend(f"  - {r}" for r in result.reasons)
    s = result.stats
    nodes = f"{s.nodes} node" + ("" if s.nodes == 1 else "s")
    devices = f"{s.devices} device" + ("" if s.devices == 1 else "s")
    lines.append(f"decided in {s.seconds * 1e3:.1f} ms over {nodes} and {devices} "
                 f"({s.steps} allocator steps)")
    return "\n".join(lines)
