"""Why a gang does not fit, in words a person can act on: one reason per cause (domain
too small, node selectors, taints, kinds of nodes that hold too few pods), each with its
code and the field of the gang's object to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from fitcore import (
    gangtypes,
)
from fitcore import reasons as codes

MAX_KINDS = 6  # kinds of nodes an explanation lists


class Stop(Protocol):
    """Why a node holds no more pods (what the search's fills record)."""

    code: str  # a fitcore.reasons code ("" when none applies)
    resource: str  # the node resource that ran out, if one did


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _nodes(n: int, one: str = "does", many: str = "do") -> str:
    return f"1 node {one}" if n == 1 else f"{n} nodes {many}"


def holds(n: int, stop: str) -> str:
    return f"holds none of its pods: {stop}" if n == 0 else \
        f"holds {n} of its pods, then {stop}"


def template_path(gang: gangtypes.Gang, pod_set: gangtypes.PodSet) -> str:
    """The path of a pod set's pod spec in the gang's object."""
    if gang.kind == "Job":
        return "spec.template.spec"
    index = next((i for i, ps in enumerate(gang.pod_sets) if ps.name == pod_set.name), 0)
    return f"spec.podSets[{index}].template.spec"


def explain(gang: gangtypes.Gang, pod_set: gangtypes.PodSet, label: str, need: int, want: int,
             ranked: list[tuple[int, str]], skipped: Mapping[str, int],
             examples: tuple[str, str],
             short: Mapping[tuple[str, int], tuple[int, str]],
             short_why: Mapping[tuple[str, int], Stop], counts: Mapping[int, int],
             single_node: bool, nodes: int) -> list[codes.Reason]:
    """One reason per cause. `examples`: a node with a taint the pod set does not tolerate
    and one that would host pods once a taint it carries for a while is off ("taint (node
    name)", "" if none)."""
    taint_example, passing_example = examples
    wanted = _plural(want, "pod") if need == want else f"at least {need} of {want} pods"
    spec = template_path(gang, pod_set)
    out: list[codes.Reason] = []

    def add(code: str, message: str, **where: Any) -> None:
        where.setdefault("field", spec)
        out.append(codes.reason(code, message, object=gang.label, pod_set=pod_set.name,
                                  **where))

    most = max((t for t, _ in ranked), default=0)
    if pod_set.topology:
        where = min(ranked, key=lambda x: (-x[0], x[1]))[1] if ranked else None
        add(codes.TOPOLOGY_DOMAIN_TOO_SMALL,
            f"{label}: needs {wanted} in one domain of {pod_set.topology}; "
            + (f"the largest, {where}, holds {most}" if where is not None
               else "no domain holds any"), held=most)
    elif single_node:
        add(codes.SHARED_CLAIM_ONE_NODE,
            f"{label}: its pods share a ResourceClaim, so all {wanted} must run on one "
            f"node; the best node holds {most}", held=most, field=f"{spec}.resourceClaims")
    else:
        add(codes.TOO_FEW_PODS, f"{label}: needs {wanted}; "
            + (f"the {nodes} nodes hold {most}" if nodes != 1 else
               f"the only node holds {most}"), held=most)
    if skipped["shared"]:
        add(codes.SHARED_CLAIM_NODES,
            f"{label}: {skipped['shared']} node(s) cannot use its allocated shared claims",
            field=f"{spec}.resourceClaims")
    if skipped["selector"]:
        add(codes.NODE_SELECTOR,
            f"{label}: {_nodes(skipped['selector'])} not match its nodeSelector or "
            "required node affinity", field=f"{spec}.nodeSelector")
    if skipped["topology"]:
        add(codes.TOPOLOGY_LABEL_MISSING,
            f"{label}: {_nodes(skipped['topology'], 'has', 'have')} no {pod_set.topology} "
            "label")
    for filt, filt_code in (("affinity", codes.POD_AFFINITY),
                            ("spread", codes.TOPOLOGY_SPREAD)):
        if skipped.get(filt):
            add(filt_code, f"{label}: {_nodes(skipped[filt])} not satisfy its required "
                + ("pod affinity or anti-affinity" if filt == "affinity"
                   else "topology spread constraints"),
                field=f"{spec}.{'affinity' if filt == 'affinity' else 'topologySpreadConstraints'}")
    if skipped["taint"]:
        add(codes.UNTOLERATED_TAINT,
            f"{label}: {_nodes(skipped['taint'], 'has', 'have')} a taint it does not "
            f"tolerate, e.g. {taint_example}", field=f"{spec}.tolerations",
            node=taint_example.rsplit("(node ", 1)[-1].rstrip(")") or None)
    if skipped.get("passing"):
        add(codes.NODE_NOT_READY,
            f"{label}: {_nodes(skipped['passing'], 'would', 'would')} host its pods but "
            f"{'is' if skipped['passing'] == 1 else 'are'} not ready for them yet (not "
            f"ready, starting, cordoned or under pressure), e.g. {passing_example}",
            node=passing_example.rsplit("(node ", 1)[-1].rstrip(")") or None)
    kinds = sorted(short.items(), key=lambda x: (-x[1][0], x[1][1]))
    for key, (count, example) in kinds[:MAX_KINDS]:
        stop, cid = key
        like = f" (and {count - 1} like it)" if count > 1 else ""
        f = short_why[key]
        code = f.code or codes.DEVICES_UNAVAILABLE
        field = (f"{spec}.containers[*].resources.requests" if code ==
                 codes.INSUFFICIENT_RESOURCE else f"{spec}.resourceClaims")
        add(code, f"{label}: node {example}{like}: {stop}", node=example, field=field,
            resource=f.resource or None, held=max(counts.get(cid, 0), 0))
    if len(kinds) > MAX_KINDS:
        rest = sum(count for _, (count, _) in kinds[MAX_KINDS:])
        add(codes.MORE_NODE_KINDS,
            f"{label}: {rest} more nodes of {len(kinds) - MAX_KINDS} other kinds hold "
            "fewer pods too")
    return out

