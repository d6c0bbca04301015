"""Build gangs, NodeShapes and a whole offline cluster from Kubernetes JSON.

Readers for the objects `fitcore.kube` does not cover: Kueue Workloads
(kueue.x-k8s.io/v1beta2) and batch/v1 Jobs as gangs, Pods bound to nodes (what they
request counts against their node), and fitgate's NodeShapes. `load` takes every object
of an offline cluster (with the file each came from) and returns a `Bundle`.

As in `kube`, every problem is collected with its object and field path, and one
`errors.InputError` is raised for all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from fitcore import (
    errors,
    extended,
    fields,
    gang,
    kube,
    model,
    podaffinity,
    read,
    shapes,
    taintrules,
    values,
    versions,
)

REQUIRED_TOPOLOGY_ANNOTATIONS = ("fitgate.io/required-topology",
                                 "kueue.x-k8s.io/podset-required-topology")
_DONE_PHASES = ("Succeeded", "Failed")
Key = tuple[str, str]  # (namespace, name)


@dataclasses.dataclass
class Bundle:
    """Everything an offline `fit` needs, parsed."""

    nodes: list[model.Node] = dataclasses.field(default_factory=list)
    inventory: model.Inventory = dataclasses.field(default_factory=model.Inventory)
    used: dict[str, dict[str, values.Quantity]] = dataclasses.field(default_factory=dict)
    shapes: list[shapes.NodeShape] = dataclasses.field(default_factory=list)
    gangs: list[gang.Gang] = dataclasses.field(default_factory=list)
    # Bound pods, as pod (anti-)affinity sees them.
    pods: list[podaffinity.BoundPod] = dataclasses.field(default_factory=list)
    # Objects of kinds fitgate does not read, per "apiVersion kind"; warnings (lenient).
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def notes(self) -> list[str]:
        """What a person should know about the input besides the verdict."""
        out = list(self.warnings)
        if self.skipped:
            total = sum(self.skipped.values())
            kinds = ", ".join(f"{k} ({n})" for k, n in sorted(self.skipped.items()))
            out.append(f"skipped {total} object{'s' if total != 1 else ''} of kinds fitgate "
                       f"does not read: {kinds}")
        return out


Document = tuple[Mapping[str, Any], str | None]  # (object, source file)

DEFAULT_KUBE_VERSION = str(versions.DEFAULT)
KUBE_VERSIONS = tuple(versions.BY_NAME)

#: Order in which kinds are read: what others refer to comes first.
KIND_ORDER = ("DeviceClass", "DeviceTaintRule", "Node", "ResourceSlice", "ResourceClaim",
              "ResourceClaimTemplate", "Pod", "NodeShape", "Workload", "Job")


def load(documents: Sequence[Document], *, lenient: bool = False,
         kube_version: str = DEFAULT_KUBE_VERSION) -> Bundle:
    """Parse an offline cluster, read as the API server hands objects to the scheduler
    (`fitcore.read`: strict fields, conversion to v1, defaulting). Kinds of other APIs are
    skipped and counted (`Bundle.skipped`); a misspelled kind is an error; `List`s are
    flattened. `lenient`: unknown fields are warnings (`Bundle.warnings`), not errors."""
    found = read.sort(list(documents), lenient=lenient)
    problems: list[errors.FieldError] = list(found.problems)
    by_kind: dict[str, list[Document]] = {k: [] for k in KIND_ORDER}
    for obj, source in found.objects:
        by_kind[str(obj["kind"])].append((obj, source))
    bundle = Bundle(skipped=dict(found.skipped), warnings=list(found.warnings))

    def parse(kind: str, fn: Any) -> list[Any]:
        out = []
        for obj, source in by_kind[kind]:
            try:
                out.append(fn(obj, source))
            except errors.InputError as exc:
                problems.extend(exc.errors)
        return out

    classes = {c.name: c for c in parse("DeviceClass", kube.device_class)}
    bundle.nodes = parse("Node", kube.node)
    slices = parse("ResourceSlice", kube.resource_slice)
    rules = parse("DeviceTaintRule", taintrules.rule)
    slices, rule_notes = taintrules.apply(slices, rules, versions.parse(kube_version))
    bundle.warnings.extend(rule_notes)
    results: list[model.AllocatedDevice] = []
    for devices in parse("ResourceClaim", kube.allocated_devices):
        results.extend(devices)
    bundle.inventory = model.Inventory(tuple(slices), classes,
                                       model.AllocatedState.from_results(results))
    bundle.pods = [p for p in parse("Pod", bound_pod) if p is not None]
    for usage in parse("Pod", pod_usage):
        if usage is None:
            continue
        node_name, requests = usage
        into = bundle.used.setdefault(node_name, {})
        for k, q in requests.items():
            into[k] = into[k] + q if k in into else q
    bundle.shapes = parse("NodeShape", node_shape)
    refs = References(
        templates={_key(o): (o, s) for o, s in by_kind["ResourceClaimTemplate"]},
        claims={_key(o): (o, s) for o, s in by_kind["ResourceClaim"]})
    bundle.gangs = parse("Workload", lambda o, s: workload(o, refs, s))
    bundle.gangs += parse("Job", lambda o, s: job(o, refs, s))
    if problems:
        raise errors.InputError(problems)
    return bundle


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


@dataclasses.dataclass
class References:
    """Objects a pod template may name: ResourceClaimTemplates and ResourceClaims."""

    templates: dict[Key, Document] = dataclasses.field(default_factory=dict)
    claims: dict[Key, Document] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------- helpers


# ------------------------------------------------------------------------ pods


def pod_requests(f: fields.Reader, spec: Mapping[str, Any], path: str
                 ) -> dict[str, values.Quantity]:
    """What the scheduler counts for a pod: the sum over containers, or the largest init
    container when that is more (per resource); pod-level requests where set; plus the
    pod overhead."""
    total: dict[str, values.Quantity] = {}
    for cpath, c in f.items(spec, "containers", path):
        resources = f.get(c, "resources", cpath, Mapping, {})
        for k, q in f.quantities(resources, "requests", f"{cpath}.resources").items():
            total[k] = total[k] + q if k in total else q
    for cpath, c in f.items(spec, "initContainers", path):
        resources = f.get(c, "resources", cpath, Mapping, {})
        for k, q in f.quantities(resources, "requests", f"{cpath}.resources").items():
            if k not in total or q > total[k]:
                total[k] = q
    # Pod-level resources (PodLevelResources, on by default) replace the containers' sum
    # for the resources they name; the RuntimeClass overhead comes on top.
    pod_level = f.get(spec, "resources", path, Mapping, {})
    total.update(f.quantities(pod_level, "requests", f"{path}.resources"))
    for k, q in f.quantities(spec, "overhead", path).items():
        total[k] = total[k] + q if k in total else q
    return total


_ONE_POD = values.Quantity.parse(1)


def pod_usage(obj: Mapping[str, Any], source: str | None = None
              ) -> tuple[str, dict[str, values.Quantity]] | None:
    """(node, requests) of a Pod bound to a node and not finished; None otherwise."""
    c = kube.collector(obj, "Pod", source)
    f = fields.Reader(c)
    spec = f.get(obj, "spec", "", Mapping, {}, required=True)
    status = f.get(obj, "status", "", Mapping, {})
    node_name = f.get(spec, "nodeName", "spec", str)
    requests = pod_requests(f, spec, "spec")
    c.raise_if_any()
    if not node_name or status.get("phase") in _DONE_PHASES:
        return None
    requests["pods"] = _ONE_POD
    return node_name, requests


def bound_pod(obj: Mapping[str, Any], source: str | None = None
              ) -> podaffinity.BoundPod | None:
    """A Pod bound to a node and not finished, as pod (anti-)affinity sees it."""
    c = kube.collector(obj, "Pod", source)
    f = fields.Reader(c)
    meta = f.get(obj, "metadata", "", Mapping, {})
    spec = f.get(obj, "spec", "", Mapping, {})
    status = f.get(obj, "status", "", Mapping, {})
    node_name = f.get(spec, "nodeName", "spec", str)
    if not node_name or status.get("phase") in _DONE_PHASES:
        return None
    labels = f.string_map(meta, "labels", "metadata")
    # Only the anti-affinity of a bound pod matters to the gang (and its problems are
    # not the gang's: they are not reported).
    rules = podaffinity.rules(fields.Reader(errors.Collector("")), spec, labels, "spec")
    return podaffinity.BoundPod(node_name, str(meta.get("namespace") or "default"), labels,
                                rules.anti_affinity)


def _tolerations(f: fields.Reader, spec: Mapping[str, Any], path: str
                 ) -> tuple[gang.Toleration, ...]:
    out = []
    for tpath, t in f.items(spec, "tolerations", path):
        op = f.get(t, "operator", tpath, str, "Equal")
        if op not in ("Exists", "Equal"):
            f.c.add(f"{tpath}.operator", f"unknown operator {op!r}; Exists or Equal")
            op = "Equal"
        out.append(gang.Toleration(f.get(t, "key", tpath, str, ""), op,
                                   f.get(t, "value", tpath, str, ""),
                                   f.get(t, "effect", tpath, str, "")))
    return tuple(out)


def _pod_claims(f: fields.Reader, spec: Mapping[str, Any], path: str, namespace: str,
                refs: References) -> tuple[gang.PodClaim, ...]:
    out = []
    seen: set[str] = set()
    for cpath, entry in f.items(spec, "resourceClaims", path):
        name = f.get(entry, "name", cpath, str, "", required=True)
        if name in seen:
            f.c.add(f"{cpath}.name", f"duplicate claim name {name!r}")
        seen.add(name)
        template = f.get(entry, "resourceClaimTemplateName", cpath, str)
        shared = f.get(entry, "resourceClaimName", cpath, str)
        if (template is None) == (shared is None):
            f.c.add(cpath, "exactly one of resourceClaimTemplateName, resourceClaimName must be "
                           "set")
            continue
        ref_name = template if template is not None else shared
        assert ref_name is not None
        field = "resourceClaimTemplateName" if template is not None else "resourceClaimName"
        table = refs.templates if template is not None else refs.claims
        kind = "ResourceClaimTemplate" if template is not None else "ResourceClaim"
        found = table.get((namespace, ref_name))
        if found is None:
            f.c.add(f"{cpath}.{field}", f"{kind} {namespace}/{ref_name} not found")
            continue
        obj, source = found
        try:
            if template is not None:
                out.append(gang.PodClaim(name, kube.claim_template(obj, source)))
            else:
                claim = kube.resource_claim(obj, source)
                allocated, nodes, selector = _allocation(obj, source)
                out.append(gang.PodClaim(name, claim, shared=True, allocated=allocated,
                                         allocated_nodes=nodes, allocated_selector=selector))
        except errors.InputError as exc:
            f.c.errors.extend(exc.errors)
    return tuple(out)


def _allocation(obj: Mapping[str, Any], source: str | None
                ) -> tuple[tuple[model.AllocatedDevice, ...] | None, frozenset[str] | None,
                           model.NodeSelector | None]:
    """An allocated claim's devices, the nodes named by its allocation's nodeSelector
    (by metadata.name or hostname; None when it does not restrict nodes by name), and
    the selector itself when it selects by other labels (a multi-node allocation)."""
    devices = kube.allocated_devices(obj, source)
    status = obj.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    if not isinstance(allocation, Mapping):
        return None, None, None
    c = errors.Collector(kube.describe(obj, "ResourceClaim"), source)
    f = fields.Reader(c)
    raw = f.get(allocation, "nodeSelector", "status.allocation", Mapping)
    names: set[str] | None = None
    by_labels = None
    if raw is not None:
        sel = fields.node_selector(f, raw, "status.allocation.nodeSelector")
        names = set()
        for term in sel.terms:
            for r in (*term.match_fields, *term.match_expressions):
                if r.operator == "In" and r.key in ("metadata.name", gang.HOSTNAME_LABEL):
                    names.update(r.values)
        if not names or any(r.key not in ("metadata.name", gang.HOSTNAME_LABEL)
                            for term in sel.terms
                            for r in (*term.match_fields, *term.match_expressions)):
            names, by_labels = None, sel
    c.raise_if_any()
    return tuple(devices), (frozenset(names) if names is not None else None), by_labels


def _pod_set(f: fields.Reader, name: str, count: int, min_count: int | None,
             template: Mapping[str, Any], path: str, namespace: str, refs: References,
             topology: str | None) -> gang.PodSet:
    meta = f.get(template, "metadata", path, Mapping, {})
    annotations = f.string_map(meta, "annotations", f"{path}.metadata")
    for a in REQUIRED_TOPOLOGY_ANNOTATIONS:
        if topology is None and annotations.get(a):
            topology = annotations[a]
    spec = f.get(template, "spec", path, Mapping, {}, required=True)
    spath = f"{path}.spec"
    pod_labels = f.string_map(meta, "labels", f"{path}.metadata")
    affinity = None
    aff = f.get(spec, "affinity", spath, Mapping, {})
    node_aff = f.get(aff, "nodeAffinity", f"{spath}.affinity", Mapping, {})
    required = f.get(node_aff, "requiredDuringSchedulingIgnoredDuringExecution",
                     f"{spath}.affinity.nodeAffinity", Mapping)
    if required is not None:
        affinity = fields.node_selector(f, required, f"{spath}.affinity.nodeAffinity."
                                               "requiredDuringSchedulingIgnoredDuringExecution")
    return gang.PodSet(
        name=name, count=count, min_count=min_count,
        requests=pod_requests(f, spec, spath),
        node_selector=f.string_map(spec, "nodeSelector", spath),
        affinity=affinity, tolerations=_tolerations(f, spec, spath),
        claims=_pod_claims(f, spec, spath, namespace, refs), topology=topology or None,
        containers=_containers(f, spec, spath),
        rules=podaffinity.rules(f, spec, pod_labels, spath))


def _containers(f: fields.Reader, spec: Mapping[str, Any], path: str
                ) -> tuple[extended.Container, ...]:
    """Each container's requests, in the order the scheduler numbers them (init
    containers first), when some container asks for an extended resource. Problems
    are reported by `pod_requests`, which reads the same fields."""
    f = fields.Reader(errors.Collector(""))
    out = []
    for key in ("initContainers", "containers"):
        for cpath, c in f.items(spec, key, path):
            resources = c.get("resources") if isinstance(c.get("resources"), Mapping) else {}
            requests = f.quantities(resources, "requests", f"{cpath}.resources")
            out.append(extended.Container(str(c.get("name") or ""), key == "initContainers",
                                          c.get("restartPolicy") == "Always", requests))
    if not any(extended.is_extended(k) for c in out for k in c.requests):
        return ()
    return tuple(out)


# ---------------------------------------------------------------------- gangs


def workload(obj: Mapping[str, Any], refs: References | None = None,
             source: str | None = None) -> gang.Gang:
    """A Kueue Workload (kueue.x-k8s.io/v1beta2) as a gang.

    Once Kueue has reserved quota, `status.admission.podSetAssignments[].count` is the
    number of pods admitted (fewer than `count` after partial admission): then exactly
    that many pods of the set must be placed."""
    refs = refs or References()
    c = errors.Collector(kube.describe(obj, "Workload"), source)
    f = fields.Reader(c)
    name, ns = fields.meta_name(f, obj)
    namespace = ns or "default"
    spec = f.get(obj, "spec", "", Mapping, {}, required=True)
    status = f.get(obj, "status", "", Mapping, {})
    admission = f.get(status, "admission", "status", Mapping, {})
    admitted: dict[str, int] = {}
    for apath, assignment in f.items(admission, "podSetAssignments", "status.admission"):
        assigned = f.get(assignment, "count", apath, int)
        if assigned is not None:
            admitted[f.get(assignment, "name", apath, str, "main")] = assigned
    pod_sets = []
    names: set[str] = set()
    entries = f.items(spec, "podSets", "spec")
    if not entries:
        c.add("spec.podSets", "must have at least one pod set")
    for path, ps in entries:
        ps_name = f.get(ps, "name", path, str, "main")
        if ps_name in names:
            c.add(f"{path}.name", f"duplicate pod set name {ps_name!r}")
        names.add(ps_name)
        count = f.get(ps, "count", path, int, 1, required=True)
        if count < 1:
            c.add(f"{path}.count", f"must be at least 1, got {count}")
        min_count = f.get(ps, "minCount", path, int)
        if min_count is not None and not 1 <= min_count <= count:
            c.add(f"{path}.minCount", f"must be between 1 and count ({count}), got {min_count}")
        if ps_name in admitted:
            count, min_count = admitted[ps_name], None
        topo_req = f.get(ps, "topologyRequest", path, Mapping, {})
        topology = f.get(topo_req, "required", f"{path}.topologyRequest", str)
        template = f.get(ps, "template", path, Mapping, {}, required=True)
        pod_sets.append(_pod_set(f, ps_name, count, min_count, template, f"{path}.template",
                                 namespace, refs, topology))
    c.raise_if_any()
    return gang.Gang(name, namespace, "Workload", tuple(pod_sets), source)


def job(obj: Mapping[str, Any], refs: References | None = None,
        source: str | None = None) -> gang.Gang:
    """A batch/v1 Job as a one-pod-set gang of `parallelism` pods."""
    refs = refs or References()
    c = errors.Collector(kube.describe(obj, "Job"), source)
    f = fields.Reader(c)
    name, ns = fields.meta_name(f, obj)
    namespace = ns or "default"
    spec = f.get(obj, "spec", "", Mapping, {}, required=True)
    parallelism = f.get(spec, "parallelism", "spec", int, 1)
    completions = f.get(spec, "completions", "spec", int)
    count = min(parallelism, completions) if completions is not None else parallelism
    if count < 1:
        c.add("spec.parallelism", f"must be at least 1, got {parallelism}")
    template = f.get(spec, "template", "spec", Mapping, {}, required=True)
    pod_set = _pod_set(f, "main", max(count, 1), None, template, "spec.template", namespace,
                       refs, None)
    c.raise_if_any()
    return gang.Gang(name, namespace, "Job", (pod_set,), source)


# ------------------------------------------------------------------- NodeShape


def node_shape(obj: Mapping[str, Any], source: str | None = None) -> shapes.NodeShape:
    """A fitgate.io/v1alpha1 NodeShape."""
    c = errors.Collector(kube.describe(obj, "NodeShape"), source)
    f = fields.Reader(c)
    name, _ = fields.meta_name(f, obj)
    spec = f.get(obj, "spec", "", Mapping, {}, required=True)
    labels = f.string_map(spec, "nodeLabels", "spec")
    allocatable = f.quantities(spec, "allocatable", "spec")
    taints = f.node_taints(spec, "spec")
    slices = []
    raw_slices = f.items(spec, "resourceSlices", "spec")
    # Pool bookkeeping a shape may leave out: a pool spans the shape's slices that name it.
    per_pool: dict[Any, int] = {}
    for _, raw in raw_slices:
        pool_name = raw.get("pool", {}).get("name") if isinstance(raw.get("pool"), Mapping) \
            else None
        per_pool[pool_name] = per_pool.get(pool_name, 0) + 1
    for i, (path, raw) in enumerate(raw_slices):
        if any(k in raw for k in ("nodeName", "nodeSelector", "allNodes")):
            c.add(path, "a shape's slices must not select nodes: each new node gets its own")
            continue
        body = dict(raw)
        body["nodeName"] = "shape-template"
        if "pool" not in body:
            body["pool"] = {"name": f"{name}-{i}", "resourceSliceCount": 1}
        elif isinstance(body["pool"], Mapping) and "resourceSliceCount" not in body["pool"]:
            body["pool"] = {**body["pool"],
                            "resourceSliceCount": per_pool.get(body["pool"].get("name"), 1)}
        slice_obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                     "metadata": {"name": f"{name}-{i}"}, "spec": body}
        try:
            s = kube.resource_slice(slice_obj, source)
        except errors.InputError as exc:
            for e in exc.errors:
                rest = e.path[len("spec"):] if e.path.startswith("spec") else f".{e.path}"
                c.add(f"{path}{rest}", e.message)
            continue
        slices.append(dataclasses.replace(s, node_name=None))
    price_raw = spec.get("price", 0)
    price = Fraction(0)
    if isinstance(price_raw, bool) or not isinstance(price_raw, (int, float, str)):
        c.add("spec.price", f"must be a number, got {price_raw!r}")
    else:
        try:
            price = Fraction(str(price_raw))
        except ValueError:
            c.add("spec.price", f"must be a number, got {price_raw!r}")
        if price < 0:
            c.add("spec.price", "must not be negative")
    topology = f.get(spec, "topology", "spec", Mapping, {})
    domain_label = f.get(topology, "domainLabel", "spec.topology", str)
    per_domain = f.get(topology, "nodesPerDomain", "spec.topology", int)
    if per_domain is not None and per_domain < 1:
        c.add("spec.topology.nodesPerDomain", f"must be at least 1, got {per_domain}")
    provisioning = f.get(spec, "provisioning", "spec", Mapping, {})
    karpenter = _karpenter(f, provisioning)
    max_nodes = f.get(spec, "maxNodes", "spec", int)
    if max_nodes is not None and max_nodes < 0:
        c.add("spec.maxNodes", f"must not be negative, got {max_nodes}")
    c.raise_if_any()
    return shapes.NodeShape(
        name=name, node_labels=labels, allocatable=allocatable, taints=taints,
        slices=tuple(slices), price=price, domain_label=domain_label,
        nodes_per_domain=per_domain,
        provisioning_class=f.get(provisioning, "className", "spec.provisioning", str),
        provisioning_parameters=f.string_map(provisioning, "parameters", "spec.provisioning"),
        karpenter=karpenter, max_nodes=max_nodes, source=source)


def _karpenter(f: fields.Reader, provisioning: Mapping[str, Any]
               ) -> shapes.KarpenterProvisioning | None:
    """`spec.provisioning.karpenter`: a NodePool and requirements; not with className."""
    raw = f.get(provisioning, "karpenter", "spec.provisioning", Mapping)
    if raw is None:
        return None
    path = "spec.provisioning.karpenter"
    if provisioning.get("className") is not None:
        f.c.add(path, "a shape is served by Karpenter or by a ProvisioningRequest class "
                      "(className), not both")
    pool = f.get(raw, "nodePool", path, str, "", required=True)
    if "nodePool" in raw and not pool:
        f.c.add(f"{path}.nodePool", "must be a non-empty NodePool name")
    requirements = tuple(fields.requirement(f, req, rp)
                         for rp, req in f.items(raw, "requirements", path))
    return shapes.KarpenterProvisioning(pool, requirements)


# -------------------------------------------------------------- the service's entry


def gang_of(obj: Mapping[str, Any],
            claim_templates: Mapping[Key, Mapping[str, Any]] | Iterable[Mapping[str, Any]] = (),
            claims: Mapping[Key, Mapping[str, Any]] | Iterable[Mapping[str, Any]] | None = None,
            source: str | None = None) -> gang.Gang:
    """The one gang reader: a Kueue Workload or batch/v1 Job dict as a gang, for the CLI,
    the webhook, the gate, `explain` and the check alike (`fitcore.gang_of`).

    `claim_templates`, `claims`: the ResourceClaimTemplates and shared ResourceClaims its
    pods may name, either keyed by (namespace, name) or as a plain collection of objects
    (keyed by their metadata). Raises errors.InputError naming the object and field for
    anything wrong, including a missing template, an unsupported kind, and input of a
    shape nobody foresaw (never another exception).

    The objects are read as the API server hands them to the scheduler (`read.normalize`:
    v1beta1/v1beta2 claims and templates converted to v1, limits standing in for missing
    requests); strict field checks are the caller's (`read.one`)."""
    try:
        return _gang_of(obj, _keyed(claim_templates), _keyed(claims or ()), source)
    except errors.InputError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # The readers validate field by field; this is the net under them for shapes of
        # input nobody foresaw, so a hostile object is refused, never a crash.
        kind = obj.get("kind") if isinstance(obj, Mapping) else None
        raise errors.InputError([errors.FieldError(
            kube.describe(obj, str(kind or "object")) if isinstance(obj, Mapping)
            else "object", "", f"cannot be read: {exc!r}", source)]) from exc


def _keyed(objs: Mapping[Key, Mapping[str, Any]] | Iterable[Mapping[str, Any]]
           ) -> Mapping[Key, Mapping[str, Any]]:
    if isinstance(objs, Mapping):
        return objs
    return {_key(o): o for o in objs if isinstance(o, Mapping)}


def _gang_of(obj: Mapping[str, Any], claim_templates: Mapping[Key, Mapping[str, Any]],
             claims: Mapping[Key, Mapping[str, Any]], source: str | None) -> gang.Gang:
    def normalized(o: Mapping[str, Any]) -> Mapping[str, Any]:
        return read.normalize(o) if isinstance(o, Mapping) else o

    refs = References(templates={k: (normalized(v), source) for k, v in claim_templates.items()},
                      claims={k: (normalized(v), source) for k, v in claims.items()})
    if not isinstance(obj, Mapping):
        raise errors.InputError([errors.FieldError("object", "", "must be an object", source)])
    obj = normalized(obj)
    kind = obj.get("kind")
    if kind == "Workload":
        return workload(obj, refs, source)
    if kind == "Job":
        return job(obj, refs, source)
    raise errors.InputError([errors.FieldError(
        kube.describe(obj, "object"), "kind",
        f"unsupported kind {kind!r}; expected Workload or Job", source)])
