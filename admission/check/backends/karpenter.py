"""NodeClaims for a plan's nodes, for shapes Karpenter serves: pure builders and readers.

Karpenter has no ProvisioningRequest: it launches nodes one NodeClaim at a time, from its
own simulation of pending pods, which knows nothing of a gang or of DRA device topology.
For a shape with `spec.provisioning.karpenter: {nodePool, requirements}` fitgate creates
the NodeClaims itself, one per planned node, the way Karpenter's provisioner creates
them:

- owned by the NodePool (ownerReference, `karpenter.sh/nodepool` label), with the
  NodePool template's nodeClassRef, labels, taints, startup taints, expireAfter and
  terminationGracePeriod;
- requirements: the NodePool template's, then the shape's (instance type, zone, capacity
  type: what the shape promises), so the node Karpenter launches is the node fitcore
  planned; the shape's `nodeLabels` become NodeClaim labels (Karpenter puts them on the
  Node), so fitgate recognises the node as of its shape;
- resources.requests: one node's share of the gang (DRA claims aside), as the
  placeholder pods of a ProvisioningRequest carry it (`provisioning.node_shares`);
- annotated `karpenter.sh/do-not-disrupt: "true"`: Karpenter's consolidation must not
  take an empty new node back before the gang's pods bind there. fitgate drops the
  annotation (from the NodeClaim and its Node) once they have bound;
- labelled as fitgate's (managed-by, workload uid and name, check, attempt) with the
  Workload and the plan in annotations, so a restarted fitgate finds its own.

Names are deterministic per (workload namespace and name, check, attempt, plan index,
node index): a second reconciler, or one restarted after a crash, creates no duplicate.
A name is at most 63 characters (Karpenter's kwok provider, like kubelets, labels the
node `kubernetes.io/hostname` with it).

All or nothing: the attempt holds `fitgate.io/nodes` NodeClaims; `attempt_state` reads
them as launching, initialized (every one Initialized), or failed (one is gone, being
deleted, or failed to launch for good): the caller then deletes every NodeClaim of the
attempt and retries, so a half-provisioned gang is never left behind.

Why a NodeClaim failed: Karpenter v1.15 does not keep a NodeClaim it cannot launch. On
insufficient capacity (or a NodeClass not ready) it publishes a Warning Event on the
NodeClaim and deletes it (`pkg/controllers/nodeclaim/lifecycle/launch.go`), so the reason
lives only in that Event. `launch_failures` reads it back from the Events and
`describe_failure` says it in a sentence for the check's message. The next plan's
NodeClaims carry that sentence (`PREVIOUS_ANNOTATION`), so the check keeps saying why the
gang waits for, or runs on, another shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import fitcore
from admission import constants as c
from admission import kueue
from admission.check import provisioning
from admission.kube import client, kinds

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODE_POOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: How many NodeClaims the attempt's plan holds (on each of them).
NODES_ANNOTATION = "fitgate.io/nodes"
#: Set on an admitted gang's NodeClaims: Karpenter's to manage from then on (never
#: deleted by fitgate, not held from other gangs' decisions).
ADMITTED_LABEL = "fitgate.io/admitted"
MAX_NAME = 63
LAUNCHED, REGISTERED, INITIALIZED = "Launched", "Registered", "Initialized"
#: Launched=False/Unknown reasons that will not get better by waiting.
FINAL_LAUNCH_REASONS = frozenset({"InsufficientCapacity", "NodeClassNotReady"})
#: The reasons of Karpenter's Warning Events on a NodeClaim it could not launch and
#: deleted, and what each means, for the check's message.
LAUNCH_EVENT_REASONS = {"InsufficientCapacityError": "insufficient capacity",
                        "NodeClassNotReady": "their NodeClass is not ready"}
#: On the NodeClaims of a next plan: why the plan before it failed.
PREVIOUS_ANNOTATION = "fitgate.io/previous-plan"
MAX_PREVIOUS = 1000


def claim_name(namespace: str, workload: str, check: str, attempt: int, index: int,
               node: int) -> str:
    """NodeClaim `node` (from 0) of plan `index` of `attempt`; NodeClaims are cluster
    scoped, so the namespace is part of the name."""
    base = f"{namespace}-{workload}-{check}-{attempt}" + (f"-alt{index}" if index else "")
    return provisioning.limit_name(f"{base}-{node}", MAX_NAME).lower()


class PoolProblem(provisioning.ShapeProblem):
    """The NodePool a shape names is missing or unusable."""


def _template(pool: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    tpl = (pool.get("spec") or {}).get("template") or {}
    return (tpl.get("metadata") or {}), (tpl.get("spec") or {})


def _requirement(r: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


def node_claims(workload: client.Obj, g: fitcore.Gang, check: str, attempt: int, index: int,
                chosen: fitcore.Plan, alternatives: Sequence[fitcore.Plan],
                node_shapes: Mapping[str, fitcore.NodeShape],
                node_pools: Mapping[str, Mapping[str, Any]],
                previous: str = "") -> list[client.Obj]:
    """The NodeClaims for `chosen` (plan `index` of this attempt); `previous`: why the plan
    before it failed. Raises ShapeProblem for a shape that is unknown or not Karpenter's, a
    NodePool that does not exist, and a plan that puts new nodes in one fresh topology
    domain the shape's requirements do not pin (Karpenter picks the domain per
    NodeClaim)."""
    meta = workload["metadata"]
    namespace = str(meta.get("namespace") or "default")
    labels = provisioning.owner_labels(workload, check, attempt)
    annotations = {
        c.WORKLOAD_ANNOTATION: f"{namespace}/{meta['name']}",
        c.PLAN_ANNOTATION: provisioning.plan_to_json(chosen),
        c.ALTERNATIVES_ANNOTATION: provisioning.plans_to_json(alternatives),
        c.PLAN_INDEX_ANNOTATION: str(index),
        NODES_ANNOTATION: str(chosen.nodes),
        DO_NOT_DISRUPT: "true",
    }
    if previous:
        annotations[PREVIOUS_ANNOTATION] = previous[:MAX_PREVIOUS]
    shares = provisioning.node_shares(g, chosen)
    out: list[client.Obj] = []
    for sc in chosen.shapes:
        shape = node_shapes.get(sc.shape)
        if shape is None:
            raise provisioning.ShapeProblem(f"the plan names NodeShape {sc.shape}, which does "
                                            "not exist (any more)")
        karp = shape.karpenter
        if karp is None:
            raise provisioning.ShapeProblem(f"NodeShape {sc.shape} is not served by Karpenter "
                                            "(no spec.provisioning.karpenter)")
        pool = node_pools.get(karp.node_pool)
        if pool is None:
            raise PoolProblem(f"NodeShape {sc.shape}: NodePool {karp.node_pool} "
                              "(spec.provisioning.karpenter.nodePool) does not exist")
        pool_meta, spec = _claim_spec(sc, shape, karp, pool, shares.get(sc.shape, {}))
        claim_labels = {**{str(k): str(v) for k, v in (pool_meta.get("labels") or {}).items()},
                        **shape.node_labels, **labels, NODE_POOL_LABEL: karp.node_pool}
        pool_ref = {"apiVersion": kinds.NODE_POOL.api_version, "kind": "NodePool",
                    "name": karp.node_pool, "uid": (pool.get("metadata") or {}).get("uid"),
                    "blockOwnerDeletion": True}
        for _ in range(sc.count):
            name = claim_name(namespace, str(meta["name"]), check, attempt, index, len(out))
            out.append({
                "apiVersion": kinds.NODE_CLAIM.api_version, "kind": "NodeClaim",
                "metadata": {"name": name, "labels": dict(claim_labels),
                             "annotations": {**{str(k): str(v) for k, v in (
                                 pool_meta.get("annotations") or {}).items()},
                                 **annotations},
                             "ownerReferences": [dict(pool_ref)]},
                "spec": spec})
    return out


def _claim_spec(sc: fitcore.ShapeCount, shape: fitcore.NodeShape,
                karp: fitcore.KarpenterProvisioning, pool: Mapping[str, Any],
                share: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The NodePool template's metadata, and the spec of each NodeClaim of `sc`: the pool's
    class, requirements and taints with the shape's added, the gang's share as requests."""
    pool_meta, pool_spec = _template(pool)
    class_ref = pool_spec.get("nodeClassRef")
    if not isinstance(class_ref, Mapping):
        raise PoolProblem(f"NodePool {karp.node_pool} has no spec.template.spec."
                          "nodeClassRef")
    requirements = [dict(r) for r in pool_spec.get("requirements") or []
                    if isinstance(r, Mapping)]
    requirements += [_requirement(r) for r in karp.requirements]
    if sc.domain is not None and shape.domain_label is not None:
        pinned = [r for r in karp.requirements if r.key == shape.domain_label
                  and r.operator == "In" and len(r.values) == 1]
        if not pinned:
            raise provisioning.ShapeProblem(
                f"NodeShape {sc.shape}: the plan puts {sc.count} new nodes in one "
                f"{shape.domain_label} domain, and Karpenter picks it per NodeClaim; "
                "pin it with a spec.provisioning.karpenter.requirements entry "
                f"{shape.domain_label} In [one value]")
    taints = [dict(t) for t in pool_spec.get("taints") or [] if isinstance(t, Mapping)]
    have = {(t.get("key"), t.get("effect")) for t in taints}
    taints += [{"key": t.key, **({"value": t.value} if t.value else {}),
                "effect": t.effect}
               for t in shape.taints if (t.key, t.effect) not in have]
    spec: dict[str, Any] = {
        "nodeClassRef": dict(class_ref),
        "requirements": requirements,
        "resources": {"requests": {k: str(q) for k, q in
                                   sorted(share.items())}},
    }
    if taints:
        spec["taints"] = taints
    for key in ("startupTaints", "expireAfter", "terminationGracePeriod"):
        if pool_spec.get(key) is not None:
            spec[key] = pool_spec[key]
    return pool_meta, spec


# --------------------------------------------------------------------- reading


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def ours(obj: Mapping[str, Any]) -> bool:
    return (_meta(obj).get("labels") or {}).get(c.MANAGED_LABEL) == "fitgate"


def attempt_of(obj: Mapping[str, Any]) -> int:
    raw = (_meta(obj).get("labels") or {}).get(c.ATTEMPT_LABEL, "0")
    return int(raw) if str(raw).isdigit() else 0


def plan_index(obj: Mapping[str, Any]) -> int:
    return provisioning.plan_index(obj)


def admitted(obj: Mapping[str, Any]) -> bool:
    return (_meta(obj).get("labels") or {}).get(ADMITTED_LABEL) == "true"


def expected_nodes(obj: Mapping[str, Any]) -> int:
    raw = (_meta(obj).get("annotations") or {}).get(NODES_ANNOTATION, "0")
    return int(raw) if str(raw).isdigit() else 0


def previous(obj: Mapping[str, Any]) -> str:
    """Why the plan before this NodeClaim's failed ("" for a first plan)."""
    return str((_meta(obj).get("annotations") or {}).get(PREVIOUS_ANNOTATION) or "")


def node_name(obj: Mapping[str, Any]) -> str | None:
    name = (obj.get("status") or {}).get("nodeName")
    return str(name) if name else None


AttemptState = Literal["launching", "initialized", "failed"]


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    state: AttemptState
    claims: tuple[client.Obj, ...]
    nodes: dict[str, str]  # NodeClaim -> its Node, for those registered
    waiting: tuple[str, ...]  # "h100-x: not launched yet (reason)" per claim not initialized
    why: str = ""  # for "failed": what failed
    failed: tuple[str, ...] = ()  # for "failed": the NodeClaims that failed
    deleting: tuple[str, ...] = ()  # those of `failed` still there, being deleted


def attempt_state(claims: Sequence[client.Obj], missing: Sequence[str] = ()) -> Attempt:
    """What an attempt's NodeClaims say. `missing`: names of the attempt's NodeClaims that
    the API server no longer has (Karpenter deletes a NodeClaim that cannot launch for
    lack of capacity or a NodeClass, and one that does not register in time)."""
    nodes = {str(_meta(x)["name"]): n for x in claims if (n := node_name(x))}
    said: list[str] = []
    if missing:
        said.append(f"NodeClaim {', '.join(sorted(missing))} is gone (Karpenter deletes a "
                    "NodeClaim it cannot launch or that does not register in time)")
    deleting = sorted(str(_meta(x)["name"]) for x in claims
                      if _meta(x).get("deletionTimestamp"))
    if deleting:
        said.append(f"NodeClaim {', '.join(deleting)} is being deleted")
    refused: list[str] = []
    waiting: list[str] = []
    for x in claims:
        name = str(_meta(x)["name"])
        if name in deleting:
            continue
        launched = kueue.condition(x, LAUNCHED)
        if launched is not None and launched.get("status") != "True" and \
                launched.get("reason") in FINAL_LAUNCH_REASONS:
            refused.append(name)
            said.append(f"NodeClaim {name} failed to launch ({launched.get('reason')}: "
                        f"{launched.get('message') or ''})".rstrip(": )") + ")")
            continue
        if kueue.is_true(x, INITIALIZED):
            continue
        if not kueue.is_true(x, LAUNCHED):
            why = (launched or {}).get("reason") or "pending"
            waiting.append(f"{name}: not launched yet ({why})")
        elif not kueue.is_true(x, REGISTERED):
            waiting.append(f"{name}: launched, its node not registered yet")
        else:
            cond = kueue.condition(x, INITIALIZED) or {}
            waiting.append(f"{name}: node {nodes.get(name)} not initialized yet"
                           + (f" ({cond['reason']})" if cond.get("reason") else ""))
    if said:
        return Attempt("failed", tuple(claims), nodes, (), "; ".join(said),
                       tuple(sorted({*missing, *deleting, *refused})), tuple(deleting))
    state: AttemptState = "launching" if waiting else "initialized"
    return Attempt(state, tuple(claims), nodes, tuple(waiting))


def launch_failures(events: Sequence[Mapping[str, Any]], names: Sequence[str]
                    ) -> dict[str, tuple[str, str]]:
    """NodeClaim -> (reason, note) for those of `names` that Karpenter says it could not
    launch, from its Warning Events (events.k8s.io/v1) regarding them; the newest Event
    per NodeClaim."""
    wanted = set(names)
    out: dict[str, tuple[str, str, str]] = {}
    for ev in events:
        regarding = ev.get("regarding") or {}
        name = str(regarding.get("name") or "")
        reason = str(ev.get("reason") or "")
        if regarding.get("kind") != "NodeClaim" or name not in wanted or \
                reason not in LAUNCH_EVENT_REASONS:
            continue
        when = str(ev.get("eventTime") or ev.get("deprecatedLastTimestamp")
                   or (_meta(ev).get("creationTimestamp")) or "")
        note = str(ev.get("note") or "")
        # Karpenter's notes start "NodeClaim <name> event: "; the name is said already.
        note = note.removeprefix(f"NodeClaim {name} event: ")
        if name not in out or when >= out[name][0]:
            out[name] = (when, reason, note)
    return {name: (reason, note) for name, (_, reason, note) in out.items()}


def describe_failure(state: Attempt, said: Mapping[str, tuple[str, str]], total: int) -> str:
    """Why the attempt failed, in a sentence: Karpenter's word for the NodeClaims it could
    not launch (`said`, from `launch_failures`), else what the NodeClaims showed."""
    if not said:
        return state.why
    by_reason: dict[str, list[str]] = {}
    for name in sorted(said):
        by_reason.setdefault(said[name][0], []).append(name)
    parts = []
    for reason, names in sorted(by_reason.items()):
        note = said[names[0]][1]
        parts.append(f"Karpenter could not launch {len(names)} of the {total} new nodes "
                     f"(NodeClaim {', '.join(names)}): {LAUNCH_EVENT_REASONS[reason]} "
                     f"({reason}: {note[:160]})")
    unexplained = [n for n in state.failed if n not in said]
    if unexplained:
        parts.append(state.why)
    return "; ".join(parts)
