"""The check on a gang Kueue's topology-aware scheduling has placed (issue #25).

With a TAS ResourceFlavor (`kueue.x-k8s.io/podset-required-topology` or
`-preferred-topology`), Kueue assigns each pod set topology domains at quota reservation
(`status.admission.podSetAssignments[].topologyAssignment`), counting CPU and memory
only, and its ungater pins the pods there. A decision of fitgate's that holds elsewhere is
worth nothing then. So, for such a Workload:

- `assignment` (`tasassignment`) reads the assigned domains and pod counts (v1beta2:
  `levels`, and `slices` of `domainCount` domains, each level's value `universal` or
  `individual` prefix+root+suffix, pod counts `universal` or `individual`);
- `within_assignment` holds the gang to exactly those domains and counts
  (`fitcore.within_domains`: one pod set per domain, its nodeSelector extended with the
  domain's labels); every decision of the reconciler (plan, fit while a request is
  pending, verify after provisioning) then runs on that gang, and `unsplit` turns its
  placements back into the Workload's pod sets before Ready;
- `sync_plan` decides (`decide`, pure):
  fits in the assigned domains → Ready; does not fit there but fits existing nodes
  elsewhere → Retry saying so, and no ProvisioningRequest (nodes in a domain Kueue will
  not use, or outside the one it did, help nobody); needs nodes → a request whose new
  nodes land inside the assigned domains (a NodeShape whose nodes carry the domain's
  labels), or Retry saying which shapes cannot help (their new nodes land in fresh
  domains).

Making Kueue choose again. Kueue v0.19.2 answers a Retry, once `requeueAfterSeconds` have
passed, by evicting the Workload (quota released, checks reset to Pending, `retryCount` +
1) and reserving again at once; the next reservation runs the same TAS algorithm
(BestFit: the tightest domain that holds the pod set by CPU and memory) on the same free
capacity, so it picks the same domain again, forever. TAS does honour the pod set's
nodeSelector and required node affinity, but only in a Topology whose lowest level is
`kubernetes.io/hostname` (then Kueue's assignment names single nodes, and only the
hostname level), and `spec.podSets` may change while the Workload holds no quota. So when
fitgate disagrees about a node-level assignment and knows a domain of the pod set's
required level where the gang fits, it *steers*: with the Retry (requeue after 5 s) it
writes the domain to the Workload's annotation `fitgate.io/topology-domain`, and once
Kueue has evicted the Workload (`steer`) it adds that domain to the pod set's nodeSelector
in the Workload. Kueue may still reserve once from the copy its queue took before the
steer (`TasGang.stale`: a coordination Retry, 5 s); the reservation after that lands in
the steered domain. The job is not changed (a nodeSelector added to its template would not
reach the Workload: Kueue's job/Workload equivalence ignores nodeSelectors); only the
disagreement is recorded on it, for `fitgate explain`. fitgate steers domains, not nodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import structlog

import fitcore
from admission import constants as c
from admission import kueue
from admission.check import capacity, predicates
from admission.check.predicates import Verdict
from admission.check.tasassignment import assignment
from admission.engine import gangs
from admission.gate import predicates as gating
from admission.kube import client, errors, kinds
from admission.runtime import metrics

if TYPE_CHECKING:
    from admission.check import workload

log = structlog.get_logger(__name__)

#: The Workload annotation that records the domain fitgate steers Kueue to, per pod set:
#: {"main": {"rack": "rack-b"}}.
DOMAIN_ANNOTATION = c.TOPOLOGY_DOMAIN_ANNOTATION
#: The job annotation recording fitgate's last disagreement with Kueue's domain (JSON:
#: assigned, message, at, steeredTo).
DISAGREEMENT_ANNOTATION = c.TOPOLOGY_DISAGREEMENT_ANNOTATION
#: Kueue's requeue after a Retry that steers it to another domain (or answers a stale
#: assignment): nothing needs time to change.
STEER_RETRY_SECONDS = c.TOPOLOGY_STEER_RETRY_SECONDS

Assigned = Mapping[str, tuple[fitcore.Domain, ...]]
HOSTNAME = "kubernetes.io/hostname"


# ------------------------------------------------------------------ the gang


@dataclasses.dataclass(frozen=True, slots=True)
class TasGang(gangs.WorkloadGang):
    """A Workload's gang held to the domains Kueue assigned: `gang` is the split gang
    (what every decision runs on), `original` the Workload's own."""

    original: gangs.WorkloadGang
    within: fitcore.Within
    assigned: Assigned
    #: Why the assignment does not match the pod sets as they are now ("" when it does):
    #: Kueue reserved from a copy taken before fitgate steered the pod set (see `steer`).
    #: Then `gang` is the Workload's own and the check only asks Kueue to reserve again.
    stale: str = ""


def within_assignment(wg: gangs.WorkloadGang, wl: Mapping[str, Any],
                      node_labels: Callable[[], Mapping[str, Mapping[str, str]]] | None = None
                      ) -> gangs.WorkloadGang:
    """`wg` held to Kueue's topology assignment, or `wg` itself when there is none.
    `node_labels`: the nodes' labels by name, to see that an assigned node still matches
    the pod set's nodeSelector. Raises fitcore.InputError for an assignment that cannot be
    read or does not add up."""
    assigned = assignment(wl)
    if not assigned:
        return wg
    stale = _conflicts(wg.gang, assigned, node_labels() if node_labels else {})
    if stale:
        return TasGang(wg.gang, wg.assignments, wg, fitcore.within_domains(wg.gang, {}),
                       assigned, stale)
    w = fitcore.within_domains(wg.gang, assigned)
    return TasGang(w.gang, wg.assignments, wg, w, assigned)


def _conflicts(g: fitcore.Gang, assigned: Assigned,
               node_labels: Mapping[str, Mapping[str, str]]) -> str:
    """Why the assignment cannot be for the pod sets as they are now: a domain value or
    an assigned node that the pod set's nodeSelector excludes ("" when none)."""
    by_name = {ps.name: ps for ps in g.pod_sets}
    out = []
    for name, domains in assigned.items():
        ps = by_name.get(name)
        for d in domains if ps is not None else ():
            assert ps is not None
            labels = dict(d.labels)
            node = node_labels.get(labels.get(HOSTNAME, ""))
            if node is not None:
                labels = {**node, **labels}
            for k, want in ps.node_selector.items():
                have = labels.get(k)
                if have is not None and have != want:
                    where = (f"node {d.labels[HOSTNAME]}" if HOSTNAME in d.labels
                             and k not in d.labels else f"{k}={have}")
                    out.append(f"pod set {name} is assigned {where}, but its nodeSelector "
                               f"now says {k}={want}")
    return "; ".join(dict.fromkeys(out))


def domain_pins(original: fitcore.Gang, assigned: Assigned) -> dict[str, str]:
    """Per pod set with a required topology level: the one value its domains share at that
    level (the pod-set-wide pin `podsetupdates` adds)."""
    out = {}
    for ps in original.pod_sets:
        values = {d.labels.get(ps.topology) for d in assigned.get(ps.name, ())} \
            if ps.topology else set()
        if len(values) == 1 and None not in values:
            out[ps.name] = str(values.pop())
    return out


def unsplit(wg: gangs.WorkloadGang, placements: Sequence[fitcore.Placement],
            domains: Mapping[str, str]
            ) -> tuple[gangs.WorkloadGang, Sequence[fitcore.Placement], Mapping[str, str]]:
    """The Workload's own gang, placements and domain pins for a decision taken on the
    split gang (unchanged for any other gang)."""
    if not isinstance(wg, TasGang):
        return wg, placements, domains
    pins = {wg.within.pod_set_of(k): v for k, v in domains.items()}
    pins.update(domain_pins(wg.original.gang, wg.assigned))
    return wg.original, wg.within.merge(placements), pins


def describe(assigned: Assigned) -> str:
    """Kueue's choice in words: `rack=rack-a` or `main: rack=rack-a (2 pods), ...`."""
    parts = []
    for name, domains in assigned.items():
        shown = ", ".join(f"{d.describe()} ({d.count} pods)" for d in domains[:4])
        if len(domains) > 4:
            shown += f" and {len(domains) - 4} more domains"
        parts.append(f"{name}: {shown}")
    return "; ".join(parts)


# ------------------------------------------------------------------ the decision


Action = Literal["ready", "request", "retry"]


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    text: str
    #: Retry: per pod set, the domain (level label -> value) where the gang fits, for
    #: steering Kueue there; empty when fitgate knows none it can steer to.
    pins: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)


def decide(wg: TasGang, there: fitcore.PlanResult, elsewhere: fitcore.PlanResult | None,
           node_shapes: Mapping[str, fitcore.NodeShape]) -> Decision:
    """What the check says about a gang Kueue placed (module docstring). `there`: the
    plan on the split gang (assigned domains, shapes whose nodes land there);
    `elsewhere`: the plan of the Workload's own gang anywhere (None when not asked, i.e.
    `there` fits); only its `fits` (existing nodes) counts here."""
    assigned = wg.assigned
    kueue = f"the topology domain Kueue assigned ({describe(assigned)})"
    if there.verdict == "fits":
        return Decision("ready", f"fits in {kueue}: " + _where(wg.within.merge(
            there.placements)))
    why = "; ".join(there.reasons) or there.verdict
    if elsewhere is not None and elsewhere.verdict == "fits":
        pins = _pins(wg, elsewhere)
        where = "; ".join(f"{k}={v}" for p in pins.values() for k, v in p.items())
        if where:
            where = f"{where}, "
        text = (f"does not fit in {kueue}, which Kueue chose by CPU and memory only; "
                f"it fits existing nodes elsewhere ({where}{_where(elsewhere.placements)})")
        if pins:
            text += "; fitgate asks Kueue to reserve again there (the pod set's nodeSelector)"
        elif not node_level(assigned):
            text += (f"; Kueue must reserve again, but fitgate cannot steer it: Kueue honours "
                     f"a pod set's nodeSelector only in a Topology whose lowest level is "
                     f"{HOSTNAME}, so it may choose the same domain")
        else:
            text += "; Kueue must reserve again"
        text += f"; in the assigned domain: {why}"  # last: the message may be cut short
        return Decision("retry", text, pins)
    if there.verdict == "needs-capacity" and there.plan is not None:
        return Decision("request", f"needs new nodes inside {kueue}")
    fresh = _fresh_domain_shapes(assigned, node_shapes)
    text = f"does not fit in {kueue}"
    if node_level(assigned):
        text += "; Kueue assigned single existing nodes, which new nodes cannot join"
    if fresh:
        text += ("; no NodeShape can add nodes there: " + ", ".join(
            f"NodeShape {s} puts new nodes in fresh {label} domains, which cannot help a "
            f"gang Kueue pinned to an existing one" for s, label in fresh))
    return Decision("retry", f"{text}; in the assigned domain: {why}")


def _where(placements: Sequence[fitcore.Placement]) -> str:
    nodes = sorted({p.node for p in placements})
    shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    return f"{len(placements)} pods on {len(nodes)} nodes ({shown})"


def node_level(assigned: Assigned) -> bool:
    """Whether the assignment goes down to single nodes (the Topology's lowest level is
    the hostname): only then does Kueue's TAS match nodes against the pod set's
    nodeSelector and affinity (v0.19.2: a leaf domain without a node passes every node
    check), so only then can fitgate steer it."""
    return bool(assigned) and all(
        list(d.labels)[-1:] == [HOSTNAME] for domains in assigned.values() for d in domains)


def _pins(wg: TasGang, elsewhere: fitcore.PlanResult) -> dict[str, dict[str, str]]:
    """Per pod set with a required topology level: the domain of that level where
    fitgate's own placement put it, unless the pod set selects
    that label already (then Kueue's choice was the pod set's own, and steering cannot
    change it). Pod sets with only a preferred topology get none, and so does every pod
    set when the assignment does not go down to nodes (`node_level`)."""
    out: dict[str, dict[str, str]] = {}
    if not node_level(wg.assigned):
        return out
    by_name = {ps.name: ps for ps in wg.original.gang.pod_sets}
    for name, domains in wg.assigned.items():
        ps = by_name.get(name)
        level = ps.topology if ps is not None else None
        # Kueue names only the hostname level of a node-level assignment (the node
        # implies the rest), so the pod set's level is pinned whether it is named or not.
        if ps is None or level is None or not domains or level in ps.node_selector:
            continue
        value = elsewhere.domains.get(name)
        if value is not None:
            out[name] = {level: value}
    return out


def _fresh_domain_shapes(assigned: Assigned, node_shapes: Mapping[str, fitcore.NodeShape]
                         ) -> list[tuple[str, str]]:
    levels = {k for domains in assigned.values() for d in domains for k in d.labels}
    return [(s.name, s.domain_label) for s in sorted(node_shapes.values(), key=lambda s: s.name)
            if s.domain_label in levels and s.domain_label not in s.node_labels]


# ------------------------------------------------------------------ the step


async def sync_plan(r: workload.WorkloadReconciler, wl: client.Obj, entry: Mapping[str, Any],
                    wg: TasGang, attempt: int) -> float | None:
    """The reconciler's plan step for a gang Kueue placed (module docstring)."""
    if wg.stale:
        return await r.sync_status(wl, entry, Verdict(
            c.RETRY, predicates.message(
                "coordination", f"Kueue assigned {describe(wg.assigned)} from an earlier "
                f"version of the pod set ({wg.stale}); reserving again (retry in "
                f"{STEER_RETRY_SECONDS}s)"), "coordination",
            requeue_after=STEER_RETRY_SECONDS))
    started = time.perf_counter()
    scope = r.scope_of(wl)
    shapes = scope.shapes if scope else None
    node_filter = scope.node_filter if scope else None
    there = await r.around_promises(wl, wg.gang, lambda held: r.inventory.plan_async(
        wg.gang, shapes=shapes, node_filter=node_filter, held=held))
    if there is None:
        return r.settings.promise_poll_seconds
    elsewhere = None
    if there.verdict != "fits":
        elsewhere = await r.inventory.plan_async(wg.original.gang, shapes=shapes,
                                                 node_filter=node_filter,
                                                 held=r.held_for_others(wl, wg.original.gang))
    metrics.DECISION_SECONDS.labels(operation="plan").observe(time.perf_counter() - started)
    node_shapes, _ = r.node_shapes()
    d = decide(wg, there, elsewhere, node_shapes)
    bound = log.bind(workload=f"{wl['metadata'].get('namespace')}/{wl['metadata'].get('name')}")
    bound.info("topology assignment decided", action=d.action, text=d.text)
    if d.action == "ready":
        return await r.sync_ready(wl, entry, wg, there.placements, there.domains, d.text)
    if d.action == "request" and there.plan is not None:
        return await capacity.sync_new_request(r, wl, entry, wg, attempt, 0, there.plan,
                                               list(there.alternatives),
                                               why=list(there.reasons))
    if (elsewhere is not None and elsewhere.verdict == "unsatisfiable"
            and elsewhere.category == "configuration"
            and await r.never_fits(wg.original.gang, scope)):
        # Not a matter of the domain: the gang fits no node and no shape anywhere.
        return await r.sync_status(wl, entry, Verdict(
            c.REJECTED, predicates.message("configuration", "the gang can never fit: "
                                           + "; ".join(elsewhere.reasons)), "configuration"))
    verdict = r.retry(entry, "capacity", d.text)
    if d.pins:
        verdict = dataclasses.replace(
            verdict, requeue_after=STEER_RETRY_SECONDS,
            message=predicates.message("capacity", f"{d.text} (retry in "
                                       f"{STEER_RETRY_SECONDS}s)"))
    # The check first (it names the resourceVersion decided on), then the marks.
    wait = await r.sync_status(wl, entry, verdict)
    await mark(r.api, wl, wg.assigned, d.text, d.pins,
               predicates.timestamp(r.clock.now()))
    return wait


# ------------------------------------------------------------------ steering


async def mark(api: client.Client, wl: Mapping[str, Any], assigned: Assigned, text: str,
               pins: Mapping[str, Mapping[str, str]], at: str) -> None:
    """Record why fitgate disagreed with Kueue's domain on the Workload's job
    (`fitgate.io/topology-disagreement`, for `fitgate explain`: Kueue resets the check's
    message at the eviction, and the job outlives its Workloads) and, when fitgate knows
    where the gang fits, the domain to steer to on the Workload
    (`fitgate.io/topology-domain`; `steer` moves the pod sets there once Kueue has
    released the quota)."""
    meta = wl.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    steer_to = {k: dict(v) for k, v in pins.items()}
    owner = gating.owner(wl, kinds.JOB_KINDS)
    if owner is not None:
        record = json.dumps({"assigned": describe(assigned), "message": text, "at": at,
                             "steeredTo": steer_to or None}, sort_keys=True)
        with contextlib.suppress(errors.NotFound):
            await api.patch(owner[0], owner[1], {"metadata": {"annotations": {
                DISAGREEMENT_ANNOTATION: record}}}, namespace=namespace)
    if steer_to:
        with contextlib.suppress(errors.NotFound):
            await api.patch(kinds.WORKLOAD, str(meta.get("name")), {"metadata": {
                "annotations": {DOMAIN_ANNOTATION: json.dumps(steer_to, sort_keys=True)}}},
                namespace=namespace)


def steer_patch(wl: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch that adds the marked domain to the nodeSelector of each marked pod
    set of a Workload holding no quota ([]: nothing to do). A label the pod set already
    selects is left as it is (the user's choice, or an earlier steer, stands)."""
    if kueue.quota_reserved(wl):
        return []
    meta = wl.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(DOMAIN_ANNOTATION)
    if not raw:
        return []
    try:
        pins = json.loads(raw)
    except ValueError:
        pins = None
    if not isinstance(pins, Mapping):
        log.warning("unreadable topology-domain annotation; not steering",
                    workload=f"{meta.get('namespace')}/{meta.get('name')}")
        return []
    ops: list[dict[str, Any]] = []
    pod_sets = (wl.get("spec") or {}).get("podSets") or []
    for i, ps in enumerate(pod_sets):
        pin = pins.get(str(ps.get("name") or "main")) if isinstance(ps, Mapping) else None
        if not isinstance(pin, Mapping):
            continue
        spec = (ps.get("template") or {}).get("spec") or {}
        selector = spec.get("nodeSelector")
        missing = {str(k): str(v) for k, v in pin.items()
                   if not isinstance(selector, Mapping) or k not in selector}
        if not missing:
            continue
        base = f"/spec/podSets/{i}/template/spec/nodeSelector"
        ops.append({"op": "test", "path": f"/spec/podSets/{i}/name", "value": ps.get("name")})
        if isinstance(selector, Mapping):
            ops += [{"op": "add", "path": f"{base}/{gating.escape_pointer(k)}", "value": v}
                    for k, v in missing.items()]
        else:
            ops.append({"op": "add", "path": base, "value": missing})
    return ops


async def steer(api: client.Client, wl: Mapping[str, Any]) -> None:
    """For a Workload Kueue evicted after fitgate's Retry and that holds no quota: move
    its marked pod sets to the domain where the gang fits (`steer_patch`), so Kueue's next
    reservation lands there. Kueue allows changing `spec.podSets` while no quota is
    reserved, reads the nodeSelector for its topology assignment, and does not copy it
    back from the job (its job/Workload equivalence compares counts, containers and
    tolerations only)."""
    cond = kueue.condition(wl, c.EVICTED) or {}
    if cond.get("reason") != "AdmissionCheck":
        return
    ops = steer_patch(wl)
    if not ops:
        return
    meta = wl.get("metadata") or {}
    try:
        await api.patch(kinds.WORKLOAD, str(meta.get("name")), ops,
                        namespace=str(meta.get("namespace") or ""), patch_type="json")
    except errors.ApiError as exc:
        # Reserved again meanwhile (pod sets are immutable then), or changed: the next
        # Retry steers again.
        log.info("could not steer Kueue's topology assignment", error=str(exc),
                 workload=f"{meta.get('namespace')}/{meta.get('name')}")
        return
    log.info("steered Kueue's topology assignment",
             workload=f"{meta.get('namespace')}/{meta.get('name')}", patch=ops)


def report(wl: Mapping[str, Any], job: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """For `fitgate explain`: the domains Kueue assigned now (if reserved), the last
    disagreement fitgate recorded on the job and where it steers Kueue (None: no TAS)."""
    try:
        assigned = describe(assignment(wl)) or None
    except fitcore.InputError as exc:
        assigned = f"unreadable: {exc}"
    annotations = gating.annotations_of(job) if job is not None else {}
    record = None
    raw = annotations.get(DISAGREEMENT_ANNOTATION)
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            record = json.loads(raw)
    if assigned is None and record is None:
        return None
    spec = (job or {}).get("spec") or {}
    selector = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") \
        if isinstance(spec, Mapping) else None
    return {"assigned": assigned, "disagreement": record,
            "jobNodeSelector": dict(selector) if isinstance(selector, Mapping) else None}
