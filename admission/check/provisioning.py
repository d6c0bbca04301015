"""ProvisioningRequests and PodTemplates for a plan's exact node shapes: pure builders.

A plan says "n new nodes of shape S" per shape. The cluster-autoscaler only simulates pods
on node templates and knows nothing of DRA devices, so fitgate asks for nodes with
*placeholder pods*: per shape of the plan one PodTemplate whose pod

- carries one node's share of the gang (the largest sum of the cpu, memory and other
  non-DRA requests the plan puts on one new node of that shape; no ResourceClaims),
- selects the shape's node group by the shape's `nodeLabels` and tolerates its taints,
- repels every other fitgate placeholder on `kubernetes.io/hostname` (required
  anti-affinity on a label fitgate sets; Kueue strips controller-uid labels), so the
  autoscaler adds exactly `count` nodes, one per placeholder, and two requests never
  share a new node (each planned node is one gang's);
- avoids the nodes that existed when fitcore planned (required node affinity
  `kubernetes.io/hostname NotIn ...`): fitcore found them unable to host the gang, but
  the autoscaler sees only CPU and memory and would otherwise book a placeholder on an
  existing node with room, report Provisioned, and add no node. Only the existing nodes
  that carry the shape's `nodeLabels` are listed (the nodeSelector keeps the placeholder
  off the others), so the list grows with the node group, not with the cluster.

Names are deterministic, so a restarted controller finds what it created instead of
asking twice: `{workload}-{check}-{attempt}` as Kueue's own check names them (attempt =
the check's `retryCount` + 1), `-alt{k}` for the k-th alternative plan tried in the same
attempt, and `ppt-{request}-{shape}` for the templates; names longer than 253 characters
are cut and end in a hash of the full name. The plan is stored as JSON in an annotation of
the request, so verification works after a restart; the ranked alternatives not yet tried
are stored next to it.

No ownerReference names the Workload: Kueue's own provisioning controller indexes
ProvisioningRequests by owner *name* and deletes those it did not create for the
Workload. They carry labels (workload uid, name, check, attempt) instead, and fitgate
deletes them itself (see `admission.check.workload`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Literal

import fitcore
from admission import constants as c
from admission import kueue
from admission.kube import client, kinds

#: fitcore's quantity, as `fitcore.PodSet.requests` holds it (admission reads fitcore only
#: through its inventory API modules: the type is not imported).
Quantity = Any
MAX_NAME = 253
MAX_LABEL_VALUE = 63
MAX_POD_SETS = 32  # a ProvisioningRequest's spec.podSets
PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class PlanFormatError(ValueError):
    """A stored plan annotation that cannot be read back."""


# ------------------------------------------------------------------------- names


def _hash(text: str, n: int) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:n]


def limit_name(name: str, limit: int = MAX_NAME) -> str:
    """`name`, or when longer than `limit` its first characters and `-` plus 5 hex
    characters of the full name's SHA-1 (as Kueue limits its object names)."""
    if len(name) <= limit:
        return name
    return name[:limit - 6].rstrip("-.") + "-" + _hash(name, 5)


def label_value(text: str) -> str:
    """`text` as a label value: itself when valid, else a cut that ends in a hash."""
    if len(text) <= MAX_LABEL_VALUE and _LABEL_VALUE.match(text):
        return text
    cut = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:MAX_LABEL_VALUE - 11].strip("-_.")
    return (cut + "-" if cut else "") + _hash(text, 10)


def request_name(workload: str, check: str, attempt: int, index: int = 0) -> str:
    """The ProvisioningRequest for plan `index` (0: the best) of `attempt` (from 1)."""
    base = f"{workload}-{check}-{attempt}"
    return limit_name(base + (f"-alt{index}" if index else ""))


def template_name(request: str, shape: str) -> str:
    return limit_name(f"ppt-{request}-{shape}")


def attempt_of(entry: Mapping[str, Any]) -> int:
    """The attempt a check entry is on: Kueue counts retries in `retryCount`."""
    retry = entry.get("retryCount") or 0
    return (retry if isinstance(retry, int) and not isinstance(retry, bool) else 0) + 1


# ------------------------------------------------------------------ plan as JSON


def plan_to_json(p: fitcore.Plan) -> str:
    """The plan as the check stores it: fitcore's one codec (`Plan.to_json`) in its
    compact form, without device results and without the names of the nodes that existed
    (thousands): verification counts as new the nodes created after the request
    (`existing_nodes`)."""
    return json.dumps(p.to_json(devices=False, existing=False), separators=(",", ":"),
                      sort_keys=True)


def plan_from_json(text: str, existing_nodes: Iterable[str] = ()) -> fitcore.Plan:
    """A plan `plan_to_json` wrote (by `Plan.from_json`), with the nodes that existed."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, Mapping):
            raise TypeError("a plan is an object")
        p = fitcore.Plan.from_json(raw)
    except (ValueError, TypeError) as exc:  # fitcore.InputError is a ValueError
        raise PlanFormatError(f"not a fitgate plan: {exc}") from exc
    if not p.shapes or any(s.count < 1 for s in p.shapes):
        raise PlanFormatError("a plan asks for at least one node of each of its shapes")
    return dataclasses.replace(p, existing_nodes=frozenset(existing_nodes))


def plans_to_json(plans: Sequence[fitcore.Plan]) -> str:
    return "[" + ",".join(plan_to_json(p) for p in plans) + "]"


def plans_from_json(text: str) -> list[fitcore.Plan]:
    try:
        raw = json.loads(text)
        if not isinstance(raw, list):
            raise TypeError("a list of plans is expected")
    except (ValueError, TypeError) as exc:
        raise PlanFormatError(f"not a list of fitgate plans: {exc}") from exc
    return [plan_from_json(json.dumps(p)) for p in raw]


def describe_plan(p: fitcore.Plan) -> str:
    """`2 × h100-8 + 1 × cpu-64` for messages."""
    totals: dict[str, int] = {}
    for s in p.shapes:
        totals[s.shape] = totals.get(s.shape, 0) + s.count
    return " + ".join(f"{n} × {name}" for name, n in totals.items())


# ------------------------------------------------------------------ node shares


def shape_of_new_node(node: str, shape_names: Iterable[str]) -> str | None:
    """The shape of a hypothetical node a plan names (`{shape}-new-{i}`), or None."""
    head, sep, tail = node.rpartition("-new-")
    if not sep or not tail.isdigit():
        return None
    return head if head in set(shape_names) else None


def node_shares(g: fitcore.Gang, p: fitcore.Plan) -> dict[str, dict[str, Quantity]]:
    """Per shape of the plan: one node's share of the gang, the per-resource maximum over
    the shape's new nodes of what the plan's pods there request (DRA claims aside)."""
    names = {s.shape for s in p.shapes}
    requests = {ps.name: ps.requests for ps in g.pod_sets}
    per_node: dict[str, dict[str, Quantity]] = {}
    node_shape: dict[str, str] = {}
    for pl in p.placements:
        shape = shape_of_new_node(pl.node, names)
        if shape is None or pl.node in p.existing_nodes:
            continue
        node_shape[pl.node] = shape
        into = per_node.setdefault(pl.node, {})
        for k, q in requests.get(pl.pod_set, {}).items():
            into[k] = into[k] + q if k in into else q
    out: dict[str, dict[str, Quantity]] = {n: {} for n in names}
    for node, reqs in per_node.items():
        share = out[node_shape[node]]
        for k, q in reqs.items():
            if k not in share or q > share[k]:
                share[k] = q
    return out


# ---------------------------------------------------------------------- builders


def owner_labels(workload: client.Obj, check: str, attempt: int) -> dict[str, str]:
    meta = workload["metadata"]
    return {c.MANAGED_LABEL: "fitgate", c.WORKLOAD_UID_LABEL: str(meta.get("uid", "")),
            c.WORKLOAD_NAME_LABEL: label_value(str(meta["name"])),
            c.CHECK_LABEL: label_value(check), c.ATTEMPT_LABEL: str(attempt)}


def provisioning_class(shape: fitcore.NodeShape) -> str:
    return shape.provisioning_class or c.DEFAULT_PROVISIONING_CLASS


def pod_template(*, name: str, namespace: str, request: str, shape: fitcore.NodeShape,
                 share: Mapping[str, Quantity], labels: Mapping[str, str],
                 avoid: Sequence[str] = ()) -> client.Obj:
    """The placeholder pod of one node of `shape` for `request`, kept off the nodes
    `avoid` (module docstring)."""
    repel = {c.PLACEHOLDER_LABEL: label_value(request)}
    resources = {k: str(q) for k, q in sorted(share.items()) if k != "pods"}
    tolerations = [{"key": t.key, "operator": "Exists", "effect": t.effect}
                   for t in shape.taints]
    spec: dict[str, Any] = {
        "nodeSelector": dict(shape.node_labels),
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchExpressions": [
                {"key": c.PLACEHOLDER_LABEL, "operator": "Exists"}]},
             "topologyKey": c.HOSTNAME_LABEL}]}},
        "containers": [{"name": "placeholder", "image": PLACEHOLDER_IMAGE,
                        "resources": {"requests": resources} if resources else {}}],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    if avoid:
        spec["affinity"]["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": c.HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(avoid)}]}]}}
    template = {"metadata": {"labels": {**repel, c.MANAGED_LABEL: "fitgate"}}, "spec": spec}
    return {"apiVersion": kinds.POD_TEMPLATE.api_version, "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                         "annotations": {c.TEMPLATE_DIGEST_ANNOTATION: digest(template)}},
            "template": template}


def digest(template: Mapping[str, Any]) -> str:
    """A digest of a pod template as fitgate writes it (`TEMPLATE_DIGEST_ANNOTATION`)."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


#: The names of the nodes whose labels include all of the given ones (an index's answer:
#: `ledgerindex.NodesByCreation.matching`).
Matching = Callable[[Mapping[str, str]], AbstractSet[str]]


def _avoid(chosen: fitcore.Plan, shape: fitcore.NodeShape,
           node_labels: Mapping[str, Mapping[str, str]] | None,
           matching: Matching | None = None) -> list[str]:
    """The existing nodes a placeholder of `shape` could be booked on: those whose
    labels include the shape's, and those whose labels are not known."""
    if node_labels is None:
        return sorted(chosen.existing_nodes)
    if matching is not None:  # set operations, not a pass over every existing node
        existing = chosen.existing_nodes
        return sorted((existing & matching(shape.node_labels))
                      | existing.difference(node_labels.keys()))
    wanted = shape.node_labels.items()
    return sorted(n for n in chosen.existing_nodes
                  if (have := node_labels.get(n)) is None or wanted <= have.items())


class ShapeProblem(ValueError):
    """A plan that names a shape fitgate cannot build a request for."""


def build(workload: client.Obj, g: fitcore.Gang, check: str, attempt: int, index: int,
          chosen: fitcore.Plan, alternatives: Sequence[fitcore.Plan],
          node_shapes: Mapping[str, fitcore.NodeShape],
          node_labels: Mapping[str, Mapping[str, str]] | None = None,
          matching: Matching | None = None) -> tuple[client.Obj, list[client.Obj]]:
    """The ProvisioningRequest for `chosen` (plan `index` of this attempt) and its
    PodTemplates (create the templates first: the autoscaler fails a request whose
    templates are missing). `node_labels`: the labels of the nodes by name, to keep each
    template's avoid list to the existing nodes its nodeSelector matches (None: all
    existing nodes; a node without labels here is listed); `matching`, when given, the
    nodes among them whose labels include a shape's (the same answer, from an index).
    Raises ShapeProblem for an
    unknown shape, more shapes than a request holds, or shapes with different
    provisioning classes."""
    meta = workload["metadata"]
    namespace = str(meta.get("namespace") or "default")
    name = request_name(str(meta["name"]), check, attempt, index)
    labels = owner_labels(workload, check, attempt)
    totals: dict[str, int] = {}
    for s in chosen.shapes:
        totals[s.shape] = totals.get(s.shape, 0) + s.count
    missing = [s for s in totals if s not in node_shapes]
    if missing:
        raise ShapeProblem(f"the plan names NodeShape {', '.join(missing)}, which does not "
                           "exist (any more)")
    if len(totals) > MAX_POD_SETS:
        raise ShapeProblem(f"the plan needs {len(totals)} shapes; a ProvisioningRequest holds "
                           f"at most {MAX_POD_SETS}")
    classes = {provisioning_class(node_shapes[s]) for s in totals}
    if len(classes) > 1:
        raise ShapeProblem("the plan mixes shapes of different provisioning classes ("
                           + ", ".join(sorted(classes)) + "); one request has one class")
    shares = node_shares(g, chosen)
    templates = []
    pod_sets = []
    parameters: dict[str, str] = {}
    for shape_name, count in totals.items():
        shape = node_shapes[shape_name]
        parameters.update(shape.provisioning_parameters)
        tname = template_name(name, shape_name)
        templates.append(pod_template(name=tname, namespace=namespace, request=name,
                                      shape=shape, share=shares.get(shape_name, {}),
                                      labels=labels, avoid=_avoid(chosen, shape, node_labels,
                                                                 matching)))
        pod_sets.append({"podTemplateRef": {"name": tname}, "count": count})
    spec: dict[str, Any] = {"provisioningClassName": classes.pop(), "podSets": pod_sets}
    if parameters:
        spec["parameters"] = parameters
    request = {
        "apiVersion": kinds.PROVISIONING_REQUEST.api_version, "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": {
                         c.WORKLOAD_ANNOTATION: f"{namespace}/{meta['name']}",
                         c.PLAN_ANNOTATION: plan_to_json(chosen),
                         c.ALTERNATIVES_ANNOTATION: plans_to_json(alternatives),
                         c.PLAN_INDEX_ANNOTATION: str(index)}},
        "spec": spec,
    }
    return request, templates


def plan_index(request: Mapping[str, Any]) -> int:
    raw = ((request.get("metadata") or {}).get("annotations") or {}).get(
        c.PLAN_INDEX_ANNOTATION, "0")
    return int(raw) if str(raw).isdigit() else 0


def template_names(request: Mapping[str, Any]) -> list[str]:
    return [str(ps.get("podTemplateRef", {}).get("name"))
            for ps in (request.get("spec") or {}).get("podSets") or []
            if ps.get("podTemplateRef", {}).get("name")]


# -------------------------------------------------------------------- conditions

RequestState = Literal["failed", "capacity-revoked", "booking-expired", "provisioned",
                       "accepted", "pending"]


def state(request: Mapping[str, Any]) -> tuple[RequestState, Mapping[str, Any] | None]:
    """What a ProvisioningRequest's conditions say, in the order Kueue's own check reads
    them (a request that failed also counts as failed once provisioned), and the
    condition that says it."""
    order: tuple[tuple[str, RequestState], ...] = (
        (c.FAILED, "failed"), (c.CAPACITY_REVOKED, "capacity-revoked"),
        (c.BOOKING_EXPIRED, "booking-expired"), (c.PROVISIONED, "provisioned"),
        (c.ACCEPTED, "accepted"))
    for kind, name in order:
        if kueue.is_true(request, kind):
            return name, kueue.condition(request, kind)
    return "pending", None
