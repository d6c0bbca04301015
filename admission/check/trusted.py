"""Trust only what fitgate wrote: the one reader of fitgate's ProvisioningRequests.

A ProvisioningRequest labelled `app.kubernetes.io/managed-by: fitgate` may have been
written by anyone allowed to create requests in some namespace. Before this reader, the
Workload reconciler believed every such request: a plan annotation with a count of
`1e999` raised OverflowError in every Workload's decision (each reads every request to
know which new nodes are whose), and a well-formed fake request "owned" the next nodes
of its shape, which fitgate then kept from every gang and bought again.

`read` accepts a request only when it is one fitgate would have made for a Workload it
knows:

- the `fitgate.io/workload` annotation names a Workload in the request's own namespace,
  present in the Workload cache, whose uid is the `fitgate.io/workload-uid` label and
  whose name matches `fitgate.io/workload-name`;
- the `fitgate.io/check` label is one of that Workload's fitgate admission checks, and
  the request's name is the one fitgate derives from (workload, check, attempt, plan
  index) (`provisioning.request_name`);
- every annotation reads back: the plan and its alternatives are JSON objects with
  shapes named by strings and counts that are integers from 1 to the Workload's pod
  count (a plan never asks for more new nodes than the gang has pods), the index and the
  attempt are small integers; the request's `spec.podSets` ask for exactly the plan's
  nodes, each through the template fitgate names for that shape.

No ownerReference is used to prove ownership: Kueue's own provisioning controller deletes
requests owned by a Workload that it did not create (see `admission.provisioning`), so
fitgate's requests carry none; the checks above bind a request to the Workload's uid, its
namespace and its current check instead.

A request labelled as fitgate's that fails a check is `Untrusted`: the error names the
object and the field, `trusted_requests` logs it (once per resourceVersion) and leaves it
out; every other request and Workload is served as before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

import fitcore
from admission import constants as c
from admission import kueue
from admission.check import provisioning
from admission.kube import client, store

log = structlog.get_logger(__name__)

#: Attempts (Kueue's retryCount + 1) and plan indexes fitgate ever writes are far below.
MAX_ATTEMPT = 1_000_000
MAX_PLAN_INDEX = 1_000
#: Alternatives stored next to a plan at most (fitcore ranks a handful).
MAX_ALTERNATIVES = 100


class Untrusted(ValueError):
    """A request labelled as fitgate's that fitgate did not write, or whose annotations do
    not read back; the message names the object and the field."""


class Unreadable(Untrusted):
    """A request that is fitgate's by every identity check (namespace, Workload uid, check,
    name) but whose annotations or podSets do not read back: its Workload's reconciler
    deletes it and asks again (the others leave it out)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """A ProvisioningRequest fitgate wrote for a Workload it knows, read back."""

    obj: client.Obj
    name: str
    namespace: str
    workload: client.Obj
    workload_uid: str
    check: str
    attempt: int
    index: int
    plan: fitcore.Plan  # without the existing nodes (see provisioning.plan_from_json)
    alternatives: tuple[fitcore.Plan, ...]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(raw: Any) -> dict[str, str]:
    return {str(k): v for k, v in raw.items() if isinstance(v, str)} \
        if isinstance(raw, Mapping) else {}


def _small_int(text: str | None, field: str, where: str, low: int, high: int) -> int:
    if text is None or not text.isdigit() or len(text) > len(str(high)) \
            or not low <= int(text) <= high:
        raise Untrusted(f"{where}: {field}: {text!r} is not an integer from {low} to {high}")
    return int(text)


def pods_of(workload: Mapping[str, Any]) -> int:
    """The gang's pod count: the larger of its pod sets' counts and the admitted counts
    (a plan never asks for more new nodes than that)."""
    adm = kueue.admission(workload) or {}
    admitted = adm.get("podSetAssignments") if isinstance(adm, Mapping) else None
    totals = []
    for sets in (admitted, (workload.get("spec") or {}).get("podSets")):
        total = 0
        for ps in sets if isinstance(sets, list) else ():
            count = ps.get("count") if isinstance(ps, Mapping) else None
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                total += count
        totals.append(total)
    return max(totals)


def _plan(raw: Any, field: str, where: str, max_nodes: int) -> fitcore.Plan:
    """One plan object, its shapes' counts checked before fitcore converts them."""
    if not isinstance(raw, Mapping):
        raise Untrusted(f"{where}: {field}: a plan is a JSON object")
    shapes = raw.get("shapes")
    if not isinstance(shapes, list) or not shapes:
        raise Untrusted(f"{where}: {field}.shapes: a non-empty list is required")
    total = 0
    for i, s in enumerate(shapes):
        if not isinstance(s, Mapping) or not isinstance(s.get("shape"), str) \
                or not s.get("shape"):
            raise Untrusted(f"{where}: {field}.shapes[{i}].shape: a NodeShape name is required")
        count = s.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= max_nodes:
            raise Untrusted(f"{where}: {field}.shapes[{i}].count: {count!r} is not an integer "
                            f"from 1 to {max_nodes} (the Workload's pod count)")
        total += count
    if total > max_nodes:
        raise Untrusted(f"{where}: {field}.shapes: {total} new nodes for a gang of "
                        f"{max_nodes} pods")
    try:
        return provisioning.plan_from_json(json.dumps(raw))
    except (provisioning.PlanFormatError, ValueError, TypeError, ArithmeticError,
            RecursionError) as exc:
        raise Untrusted(f"{where}: {field}: {exc}") from None


def _json(text: str | None, field: str, where: str) -> Any:
    if text is None:
        raise Untrusted(f"{where}: {field}: missing")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Untrusted(f"{where}: {field}: not JSON: {exc}") from None


def read(obj: Mapping[str, Any], workloads: store.Store, checks: Iterable[str]
         ) -> Request | None:
    """The request read back, None when it is not labelled as fitgate's; `Untrusted` when
    it is but fitgate did not write it for a Workload it knows (module docstring).
    `checks`: the names of fitgate's AdmissionChecks."""
    meta = _meta(obj)
    labels, annotations = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    if labels.get(c.MANAGED_LABEL) != "fitgate":
        return None
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    where = f"ProvisioningRequest {namespace}/{name}"
    ref = annotations.get(c.WORKLOAD_ANNOTATION)
    field = f"metadata.annotations[{c.WORKLOAD_ANNOTATION!r}]"
    wl_ns, sep, wl_name = (ref or "").partition("/")
    if not sep or wl_ns != namespace or not wl_name:
        raise Untrusted(f"{where}: {field}: {ref!r} does not name a Workload in the "
                        f"request's namespace {namespace!r}")
    wl = workloads.get(wl_name, namespace)
    uid = labels.get(c.WORKLOAD_UID_LABEL)
    if wl is None:
        raise Untrusted(f"{where}: {field}: Workload {ref} is not known")
    if not uid or str(_meta(wl).get("uid") or "") != uid:
        raise Untrusted(f"{where}: metadata.labels[{c.WORKLOAD_UID_LABEL!r}]: {uid!r} is not "
                        f"the uid of Workload {ref}")
    if labels.get(c.WORKLOAD_NAME_LABEL) != provisioning.label_value(wl_name):
        raise Untrusted(f"{where}: metadata.labels[{c.WORKLOAD_NAME_LABEL!r}]: does not name "
                        f"Workload {ref}")
    ours = sorted(str(e.get("name")) for e in kueue.entries(wl, set(checks)))
    check_label = labels.get(c.CHECK_LABEL)
    check = next((n for n in ours if provisioning.label_value(n) == check_label), None)
    if check is None:
        raise Untrusted(f"{where}: metadata.labels[{c.CHECK_LABEL!r}]: {check_label!r} is not "
                        f"a fitgate admission check of Workload {ref}")
    attempt = _small_int(labels.get(c.ATTEMPT_LABEL), f"metadata.labels[{c.ATTEMPT_LABEL!r}]",
                         where, 1, MAX_ATTEMPT)
    index = _small_int(annotations.get(c.PLAN_INDEX_ANNOTATION, "0"),
                       f"metadata.annotations[{c.PLAN_INDEX_ANNOTATION!r}]", where, 0,
                       MAX_PLAN_INDEX)
    if name != provisioning.request_name(wl_name, check, attempt, index):
        raise Untrusted(f"{where}: metadata.name: not the name fitgate gives the request of "
                        f"Workload {ref}, check {check}, attempt {attempt}, plan {index}")
    try:
        return _content(obj, name, wl, uid, check, attempt, index, where)
    except Unreadable:
        raise
    except Untrusted as exc:
        raise Unreadable(str(exc)) from None


def _content(obj: Mapping[str, Any], name: str, wl: client.Obj, uid: str, check: str,
             attempt: int, index: int, where: str) -> Request:
    meta = _meta(obj)
    annotations = _strings(meta.get("annotations"))
    plan, alternatives = _plans(annotations.get(c.PLAN_ANNOTATION),
                                annotations.get(c.ALTERNATIVES_ANNOTATION, "[]"), pods_of(wl),
                                where)
    _check_pod_sets(obj, name, plan, where)
    return Request(dict(obj), name, str(meta.get("namespace") or ""), wl, uid, check, attempt,
                   index, plan, alternatives)


#: Plans read back, by (plan text, alternatives text, the Workload's pod count): every
#: decision reads every request (to know which new nodes are whose), so each request's
#: annotations are parsed once, not once per decision. Only what reads back is kept.
_PLANS: dict[tuple[str, str | None, int], tuple[fitcore.Plan, tuple[fitcore.Plan, ...]]] = {}
_PLANS_MAX = 4096


def _plans(plan_text: str | None, alts_text: str | None, max_nodes: int, where: str
           ) -> tuple[fitcore.Plan, tuple[fitcore.Plan, ...]]:
    """A request's plan and alternatives from their annotations (`_plan`), kept."""
    if plan_text is not None:
        hit = _PLANS.get((plan_text, alts_text, max_nodes))
        if hit is not None:
            return hit
    plan_field = f"metadata.annotations[{c.PLAN_ANNOTATION!r}]"
    plan = _plan(_json(plan_text, plan_field, where), plan_field, where, max_nodes)
    alt_field = f"metadata.annotations[{c.ALTERNATIVES_ANNOTATION!r}]"
    raw_alts = _json(alts_text, alt_field, where)
    if not isinstance(raw_alts, list) or len(raw_alts) > MAX_ALTERNATIVES:
        raise Untrusted(f"{where}: {alt_field}: not a list of at most {MAX_ALTERNATIVES} plans")
    alternatives = tuple(_plan(a, f"{alt_field}[{i}]", where, max_nodes)
                         for i, a in enumerate(raw_alts))
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.pop(next(iter(_PLANS)))
    assert plan_text is not None  # `_json` refused a missing plan
    _PLANS[(plan_text, alts_text, max_nodes)] = (plan, alternatives)
    return plan, alternatives


def _check_pod_sets(obj: Mapping[str, Any], name: str, plan: fitcore.Plan, where: str) -> None:
    """`spec.podSets` ask for the plan's nodes, each shape through fitgate's template."""
    want: dict[str, int] = {}
    for s in plan.shapes:
        want[provisioning.template_name(name, s.shape)] = \
            want.get(provisioning.template_name(name, s.shape), 0) + s.count
    spec = obj.get("spec")
    pod_sets = spec.get("podSets") if isinstance(spec, Mapping) else None
    have: dict[str, int] = {}
    for ps in pod_sets if isinstance(pod_sets, list) else ():
        ref = ps.get("podTemplateRef") if isinstance(ps, Mapping) else None
        tname = ref.get("name") if isinstance(ref, Mapping) else None
        count = ps.get("count") if isinstance(ps, Mapping) else None
        if isinstance(tname, str) and isinstance(count, int) and not isinstance(count, bool):
            have[tname] = have.get(tname, 0) + count
        else:
            have[""] = -1  # an entry fitgate does not write
    if have != want:
        raise Untrusted(f"{where}: spec.podSets: do not ask for the nodes of its plan "
                        f"through fitgate's templates ({provisioning.describe_plan(plan)})")


_reported: dict[tuple[str, str, str], None] = {}  # (namespace, name, resourceVersion)
_REPORTED_MAX = 4096


def report(obj: Mapping[str, Any], exc: Untrusted) -> None:
    """Log an untrusted request once per resourceVersion."""
    meta = _meta(obj)
    key = (str(meta.get("namespace")), str(meta.get("name")), str(meta.get("resourceVersion")))
    if key in _reported:
        return
    if len(_reported) >= _REPORTED_MAX:
        _reported.pop(next(iter(_reported)))
    _reported[key] = None
    log.warning("ProvisioningRequest ignored: not one fitgate wrote", error=str(exc))


def trusted_requests(requests: store.Store, workloads: store.Store, checks: Iterable[str],
                     namespace: str | None = None,
                     unreadable: list[client.Obj] | None = None) -> list[Request]:
    """Every request fitgate wrote for a Workload it knows (in `namespace`, None: all);
    the others are logged (`report`) and left out, those `Unreadable` also appended to
    `unreadable` when given."""
    return trusted_of(requests.list(namespace), workloads, checks, unreadable)


def trusted_of(objs: Iterable[client.Obj], workloads: store.Store, checks: Iterable[str],
               unreadable: list[client.Obj] | None = None) -> list[Request]:
    """`trusted_requests` of the requests `objs` (those of a store, narrowed by an
    index: `ledgerindex.Requests`), in their order."""
    names = frozenset(checks)
    out = []
    for r in objs:
        got = _read_kept(r, workloads, names)
        if isinstance(got, Untrusted):
            report(r, got)
            if unreadable is not None and isinstance(got, Unreadable):
                unreadable.append(r)
            continue
        if got is not None:
            out.append(got)
    return out


#: The last reading of each request (namespace, name): the request object, the Workload
#: object its annotation names (None: none), the check names, and what `read` made of
#: them. The stores replace an object on every change, so the same two objects and
#: checks read the same again; kept references keep an object's identity from being
#: reused.
_READS: dict[tuple[str, str], tuple[client.Obj, client.Obj | None, frozenset[str],
                                    Request | Untrusted | None]] = {}
_READS_MAX = 4096


def _read_kept(obj: client.Obj, workloads: store.Store, checks: frozenset[str]
               ) -> Request | Untrusted | None:
    """`read` (its error returned, not raised), kept while the request, its Workload
    and the checks are the same: every decision reads every request fitgate wrote (who
    owns which new node), on the event loop."""
    meta = _meta(obj)
    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    _, _, wl_name = (_strings(meta.get("annotations")).get(c.WORKLOAD_ANNOTATION)
                     or "").partition("/")
    wl = workloads.get(wl_name, key[0]) if wl_name else None
    kept = _READS.get(key)
    if kept is not None and kept[0] is obj and kept[1] is wl and kept[2] == checks:
        return kept[3]
    got: Request | Untrusted | None
    try:
        got = read(obj, workloads, checks)
    except Untrusted as exc:
        got = exc
    if kept is None and len(_READS) >= _READS_MAX:
        _READS.pop(next(iter(_READS)))
    _READS[key] = (obj, wl, checks, got)
    return got
