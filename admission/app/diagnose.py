"""`fitgate explain`: where a gang stands and what holds it back, from the live objects.

Given a Workload or a job (`NAMESPACE/NAME`, or `job/NAME -n NAMESPACE` as kubectl
spells it), `explain` reads through the `Client`:

- the Workload and its owning job (either finds the other: ownerReferences one way, the
  Workloads of the namespace the other);
- fitgate's AdmissionChecks (by controllerName) and the Workload's entry for them;
- the ProvisioningRequests fitgate made for the Workload (label `fitgate.io/workload-uid`),
  the latest attempt's conditions and the plan it asks nodes for;
- the gate's verdict (`fitgate.io/explanation` on the job);
- unless `fit=False`, the inventory (Nodes, ResourceSlices, DeviceClasses, allocated
  ResourceClaims, bound Pods, NodeShapes) and FitPolicies, to plan the gang now by the
  rules of the server's version (GET /version): per pod set, what the closest node lacks.

A read the API server refuses (a user who may read only their namespace) is reported,
never read as empty (`admission.app.visibility`): without the whole inventory there is
no plan now, and the report says what it could not see and what the Job's and the
Workload's own annotations and conditions say.

The stage is one of: `no workload yet`, `gated` (held by fitgate before quota), `waiting
for quota`, `planning` (the check works on it), `provisioning` (a ProvisioningRequest is
out), `verifying` (the nodes came; fitgate checks them), `admitted`, `running`, `rejected`,
`finished`. The category (capacity, configuration, coordination) comes from the gate's
verdict, the check's message (which leads with it), or the plan made now.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import fitcore
from admission import constants as c
from admission.app import kubeversion, visibility
from admission.check import provisioning, topology
from admission.engine import fitting
from admission.gate import predicates as gating
from admission.kube import client, errors, kinds, store
from admission.policy import fitpolicy as policy

STAGES = ("no workload yet", "gated", "waiting for quota", "planning", "provisioning",
          "verifying", "checking", "admitted", "running", "rejected", "finished", "unknown")
_CATEGORIES = ("capacity", "configuration", "coordination")


class NotFound(Exception):
    """Neither a Workload nor a job of that name."""


@dataclasses.dataclass
class Report:
    namespace: str
    workload: str | None
    job: tuple[str, str] | None  # (kind, name)
    stage: str
    summary: str
    category: str | None = None
    queue: dict[str, Any] | None = None
    check: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    provisioning_request: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    fit: dict[str, Any] | None = None
    topology: dict[str, Any] | None = None  # Kueue's TAS domains, fitgate's disagreement
    problems: list[str] = dataclasses.field(default_factory=list)
    quota: dict[str, Any] | None = None  # the Workload's QuotaReserved, as it stands
    #: Every admission check entry, when which one is fitgate's cannot be read.
    checks: list[dict[str, Any]] | None = None
    unseen: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    no_fit: str | None = None  # why there is no fit now, when reads were refused

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "workload": self.workload,
            "job": {"kind": self.job[0], "name": self.job[1]} if self.job else None,
            "stage": self.stage, "summary": self.summary, "category": self.category,
            "queue": self.queue, "check": self.check, "gate": self.gate,
            "provisioningRequest": self.provisioning_request, "plan": self.plan,
            "fit": self.fit, "topology": self.topology, "problems": self.problems,
            "quota": self.quota, "checks": self.checks, "unseen": self.unseen,
            "noFit": self.no_fit,
        }

    def to_text(self) -> str:
        who = f"Workload {self.namespace}/{self.workload}" if self.workload else (
            f"{self.job[0]} {self.namespace}/{self.job[1]}" if self.job else self.namespace)
        if self.workload and self.job:
            who += f" ({self.job[0]} {self.job[1]})"
        lines = [who, f"stage: {self.stage}: {self.summary}"]
        if self.category:
            lines.append(f"held back by: {self.category}")
        lines.extend(visibility.unseen_lines(self.unseen))
        if self.no_fit:
            lines.append(self.no_fit)
        lines.extend(visibility.quota_line(self.quota))
        if self.queue:
            lines.append(f"queue: LocalQueue {self.queue['localQueue']} → ClusterQueue "
                         f"{self.queue.get('clusterQueue') or '(unknown)'}")
        if self.check:
            msg = f": {self.check['message']}" if self.check.get("message") else ""
            lines.append(f"check {self.check['name']}: {self.check['state']}{msg}")
        if self.checks is not None:
            lines.append("checks (which is fitgate's is unknown: AdmissionChecks not "
                         "readable):" if self.checks else "checks: none on the Workload")
            lines.extend(f"  {e['name']}: {e['state']}"
                         + (f": {e['message']}" if e.get("message") else "")
                         for e in self.checks)
        lines.extend(_topology_lines(self.topology))
        if self.gate and self.gate.get("explanation"):
            ex = self.gate["explanation"]
            lines.append(f"gate: holds it ({ex.get('category')}"
                         + (", policy violation" if ex.get("policyViolation") else "")
                         + f"), evaluated {ex.get('evaluatedAt')}")
            if self.fit is None:
                lines.extend(visibility.gate_reason_lines(ex))
        pr = self.provisioning_request
        if pr:
            attempt = pr["attempt"] if pr["attempt"] is not None else "unknown"
            lines.append(f"provisioning request {pr['name']} (attempt {attempt}): "
                         f"{pr['state']}")
            for cond in pr["conditions"]:
                why = f" {cond['reason']}" if cond.get("reason") else ""
                msg = f": {cond['message']}" if cond.get("message") else ""
                lines.append(f"  {cond['type']}={cond['status']}{why}{msg}")
        if self.plan:
            source = f" ({self.plan['source']})" if self.plan.get("source") else ""
            lines.append(f"plan{source}: "
                         + " + ".join(f"{s['count']} × {s['shape']}"
                                      + (f" in {s['domain']}" if s.get("domain") else "")
                                      for s in self.plan["shapes"])
                         + f"  (price {self.plan['price']})")
        if self.fit:
            f = self.fit
            lines.append(f"fit now: {f['verdict']}"
                         + (f" ({f['category']})" if f.get("category") else "")
                         + (f"; allowed: {f['allowed']}" if f.get("allowed") else "")
                         + f" [rules of Kubernetes {f['kubeVersion']}]")
            for ps in f["podSets"]:
                pods = "pod" if ps["count"] == 1 else "pods"
                lines.append(f"pod set {ps['name']} ({ps['count']} {pods}):")
                lines.extend(f"  - {r}" for r in ps["reasons"] or ["fits"])
            for r in f["other"]:
                lines.append(f"  - {r}")
        lines.extend(f"problem: {p}" for p in self.problems)
        return "\n".join(lines)


def _topology_lines(t: Mapping[str, Any] | None) -> list[str]:
    if not t:
        return []
    out = [f"topology: Kueue assigned {t['assigned']}" if t.get("assigned") else
           "topology: no domain assigned now (no quota reserved)"]
    d = t.get("disagreement")
    if isinstance(d, Mapping):
        out.append(f"  fitgate disagreed at {d.get('at')} with Kueue's {d.get('assigned')}: "
                   f"{d.get('message')}")
        steered = d.get("steeredTo")
        if isinstance(steered, Mapping):
            out.append("  fitgate steered Kueue's next reservation to " + "; ".join(
                f"{ps}: {', '.join(f'{k}={v}' for k, v in pin.items())}"
                for ps, pin in steered.items() if isinstance(pin, Mapping))
                + " (the Job's template nodeSelector)")
    return out


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return {str(x.get("type")): x for x in conds or [] if isinstance(x, Mapping)}


def _true(obj: Mapping[str, Any], cond: str) -> bool:
    return _conditions(obj).get(cond, {}).get("status") == "True"


def job_kind(name: str) -> kinds.Kind | None:
    """A job kind by the names kubectl accepts (`job`, `jobs`, `jobset`, `jobs.batch`)."""
    want = name.lower()
    for k in kinds.JOB_KINDS:
        if want in (k.kind.lower(), k.plural, f"{k.plural}.{k.group}",
                    f"{k.kind.lower()}.{k.group}"):
            return k
    return None


async def _resolve(reads: visibility.Reads, namespace: str, name: str, kind: str | None
                   ) -> tuple[client.Obj | None, tuple[kinds.Kind, client.Obj] | None]:
    """(the Workload or None, (job kind, job) or None). A refused read of the target
    itself raises `errors.ApiError`; a refused read of the other half is noted."""
    api = reads.api
    wanted_job = job_kind(kind) if kind else None
    if kind and wanted_job is None and kind.lower() not in ("workload", "workloads", "wl",
                                                             "workload.kueue.x-k8s.io"):
        raise NotFound(f"{kind!r} is neither a Workload nor a job kind fitgate knows")
    wl: client.Obj | None = None
    if wanted_job is None:
        try:
            wl = await api.get(kinds.WORKLOAD, name, namespace)
        except errors.NotFound:
            if kind:
                raise NotFound(f"Workload {namespace}/{name} not found") from None
    if wl is not None:
        found = gating.owner(wl, kinds.JOB_KINDS)
        job = None
        if found is not None:
            with contextlib.suppress(errors.NotFound):
                got = await reads.get(found[0], found[1], namespace)
                job = (found[0], got) if got is not None else None
        return wl, job
    for k in ([wanted_job] if wanted_job else [kinds.JOB]):
        try:
            obj = await api.get(k, name, namespace)
        except errors.NotFound:
            continue
        uid = _meta(obj).get("uid")
        for w in await reads.list(kinds.WORKLOAD, namespace) or []:
            for ref in _meta(w).get("ownerReferences") or []:
                if ref.get("uid") == uid or (ref.get("kind") == k.kind
                                             and ref.get("name") == name):
                    return w, (k, obj)
        return None, (k, obj)
    raise NotFound(f"no Workload or {(wanted_job or kinds.JOB).kind} {namespace}/{name}")


async def _stores(reads: visibility.Reads, kinds_: Sequence[kinds.Kind],
                  namespaced: Mapping[kinds.Kind, str] | None = None
                  ) -> dict[kinds.Kind, store.Store]:
    """A store per kind (listed in the namespace `namespaced` names for it, else
    everywhere); a kind not served reads as empty, a refused one is in `reads.unseen`."""
    out = {}
    for k in kinds_:
        s = store.Store(k)
        s.replace(await reads.list(k, (namespaced or {}).get(k)) or [])
        out[k] = s
    return out


def _gate_explanation(job: tuple[kinds.Kind, client.Obj] | None) -> Mapping[str, Any] | None:
    """The gate's verdict on the job (`fitgate.io/explanation`), when it is an object."""
    if job is None:
        return None
    raw = gating.annotations_of(job[1]).get(gating.EXPLANATION)
    try:
        explanation = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        return None
    # Not the gate's (not an object): nothing to read from it.
    return explanation if isinstance(explanation, Mapping) else None


async def explain(api: client.Client, namespace: str, name: str, kind: str | None = None, *,
                  fit: bool = True) -> Report:
    """See the module docstring."""
    reads = visibility.Reads(api)
    wl, job = await _resolve(reads, namespace, name, kind)
    job_ref = (job[0].kind, str(_meta(job[1]).get("name"))) if job else None
    explanation = _gate_explanation(job)
    if wl is None:
        gated = job is not None and gating.gated_by_us(job[1])
        report = Report(namespace, None, job_ref, "no workload yet",
                        "Kueue has not made a Workload for this job yet"
                        + (" (it carries fitgate's gate)" if gated else ""),
                        gate={"gated": gated, "explanation": explanation})
        if reads.refused((kinds.WORKLOAD,)):
            report.stage = "unknown"
            report.summary = (f"the Workloads of namespace {namespace} could not be read"
                              + (" (the job carries fitgate's gate)" if gated else ""))
        report.unseen = [u.to_json() for u in reads.unseen]
        return report
    report = Report(namespace, str(_meta(wl).get("name")), job_ref, "", "")
    entry, queue = await _queue_and_check(reads, report, wl, namespace)
    report.gate = {"gated": gating.gated_by_us(wl) or (job is not None and
                                                       gating.gated_by_us(job[1])),
                   "explanation": explanation}
    report.quota = visibility.quota(wl)
    request = await _latest_request(reads, wl)
    if request is not None:
        _report_request(report, request)
    report.topology = topology.report(wl, job[1] if job else None)
    requests_known = not reads.refused((kinds.PROVISIONING_REQUEST,))
    report.stage, report.summary = _stage(wl, job, entry, request, report.gate["gated"],
                                          requests_known)
    if report.checks is not None:  # which check is fitgate's is not known
        report.summary = report.summary.replace(
            "fitgate's check is Ready; waiting for the other checks",
            "every admission check is Ready; Kueue admits it next").replace(
            "fitgate's check", f"check {entry.get('name') if entry else '?'}")
    report.category = _category(report, explanation, entry)
    if fit:
        await _fit_now(reads, report, wl, namespace, queue)
        if report.category is None and report.stage in ("gated", "waiting for quota",
                                                        "planning") and report.fit:
            report.category = report.fit.get("category")
    report.unseen = [u.to_json() for u in reads.unseen]
    return report


async def _queue_and_check(reads: visibility.Reads, report: Report, wl: client.Obj,
                           namespace: str
                           ) -> tuple[Mapping[str, Any] | None, gating.Queue | None]:
    """Fill the report's queue and fitgate's check entry; returns (that entry, the
    queue). Without the AdmissionChecks, every entry is listed and the one that decides
    the stage guessed."""
    spec = wl.get("spec") if isinstance(wl.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    lq = spec.get("queueName")
    aux = await _stores(reads, (kinds.LOCAL_QUEUE, kinds.CLUSTER_QUEUE,
                                kinds.ADMISSION_CHECK), {kinds.LOCAL_QUEUE: namespace})
    queues = gating.Queues(aux[kinds.LOCAL_QUEUE], aux[kinds.CLUSTER_QUEUE],
                           aux[kinds.ADMISSION_CHECK])
    queue = queues.resolve(namespace, lq) if isinstance(lq, str) and lq else None
    status = wl.get("status") if isinstance(wl.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    if queue is not None:
        # Without the queues, the ClusterQueue the Workload's quota is reserved in.
        admitted_in = (status.get("admission") or {}).get("clusterQueue") \
            if isinstance(status.get("admission"), Mapping) else None
        report.queue = {"localQueue": queue.local_queue,
                        "clusterQueue": queue.cluster_queue or admitted_in,
                        "checks": list(queue.checks)}
    if reads.refused((kinds.ADMISSION_CHECK,)):
        report.checks = visibility.check_entries(status)
        return visibility.guess_entry(report.checks), queue
    ours = gating.our_checks(aux[kinds.ADMISSION_CHECK].list())
    entry = next((e for e in status.get("admissionChecks") or []
                  if isinstance(e, Mapping) and e.get("name") in ours), None)
    if entry is not None:
        report.check = {"name": entry.get("name"), "state": entry.get("state", "Pending"),
                        "message": entry.get("message", ""),
                        "retryCount": entry.get("retryCount", 0)}
    return entry, queue


def _report_request(report: Report, request: client.Obj) -> None:
    state, _ = provisioning.state(request)
    report.provisioning_request = {
        "name": _meta(request).get("name"),
        "attempt": _attempt(request),
        "state": state,
        "conditions": [{k: cond.get(k) for k in ("type", "status", "reason", "message")}
                       for cond in _conditions(request).values()]}
    if report.provisioning_request["attempt"] is None:
        label = (_meta(request).get("labels") or {}).get(c.ATTEMPT_LABEL)
        report.problems.append(
            f"ProvisioningRequest {_meta(request).get('name')}: metadata.labels"
            f"[{c.ATTEMPT_LABEL!r}]: {str(label)[:40]!r} is not an attempt number")
    raw_plan = (_meta(request).get("annotations") or {}).get(c.PLAN_ANNOTATION)
    if isinstance(raw_plan, str):
        try:
            p = provisioning.plan_from_json(raw_plan)
            report.plan = _plan_json(p, "the ProvisioningRequest's")
        except provisioning.PlanFormatError as exc:
            report.problems.append(f"ProvisioningRequest {_meta(request).get('name')}: "
                                   f"{exc}")


async def _latest_request(reads: visibility.Reads, wl: client.Obj) -> client.Obj | None:
    uid = _meta(wl).get("uid")
    if not uid:
        return None
    items = await reads.list(kinds.PROVISIONING_REQUEST, str(_meta(wl).get("namespace")),
                             label_selector=f"{c.WORKLOAD_UID_LABEL}={uid}")
    if not items:
        return None

    def attempt(r: client.Obj) -> tuple[int, str]:
        return (_attempt(r, 0) or 0, str(_meta(r).get("creationTimestamp")))
    return max(items, key=attempt)


def _attempt(request: client.Obj, default: int = 1) -> int | None:
    """The attempt number of a ProvisioningRequest (its `fitgate.io/attempt` label);
    `default` without the label, None when the label is not a number."""
    labels = _meta(request).get("labels")
    raw = labels.get(c.ATTEMPT_LABEL) if isinstance(labels, Mapping) else None
    if raw is None or raw == "":
        return default
    text = str(raw)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def _stage(wl: client.Obj, job: tuple[kinds.Kind, client.Obj] | None,
           entry: Mapping[str, Any] | None, request: client.Obj | None, gated: bool,
           requests_known: bool = True) -> tuple[str, str]:
    if _true(wl, c.FINISHED):
        return "finished", _conditions(wl)[c.FINISHED].get("message") or "the job finished"
    if entry is not None and entry.get("state") == c.REJECTED:
        return "rejected", "fitgate's check rejected it; Kueue deactivated the Workload"
    if gated:
        return "gated", ("fitgate holds it before quota (kueue.x-k8s.io/admission-gated-by) "
                         "until its gang can fit")
    if _true(wl, c.ADMITTED):
        active = ((job[1].get("status") or {}).get("active") or 0) if job else 0
        if _true(wl, "PodsReady") or active:
            return "running", "admitted; its pods run"
        return "admitted", "admitted; its pods are starting"
    if not _true(wl, c.QUOTA_RESERVED):
        if entry is not None and entry.get("state") == c.RETRY:
            return "waiting for quota", "fitgate asked to retry; Kueue released the quota"
        reason = _conditions(wl).get(c.QUOTA_RESERVED, {}).get("message")
        return "waiting for quota", reason or "Kueue has not reserved quota yet"
    if entry is None or entry.get("state") == c.READY:
        return "admitted", "fitgate's check is Ready; waiting for the other checks"
    if request is None and not requests_known:
        return "checking", (f"quota reserved; check {entry.get('name')} is "
                            f"{entry.get('state', 'Pending')} (its ProvisioningRequests "
                            "could not be read)")
    if request is None:
        return "planning", "quota reserved; fitgate plans where the gang goes"
    state, _ = provisioning.state(request)
    if state == "provisioned":
        return "verifying", ("the ProvisioningRequest is Provisioned; fitgate checks the "
                             "new nodes")
    return "provisioning", f"the ProvisioningRequest is {state}; waiting for new nodes"


def _category(report: Report, explanation: Any, entry: Mapping[str, Any] | None
              ) -> str | None:
    if report.stage == "gated" and isinstance(explanation, Mapping):
        cat = explanation.get("category")
        return str(cat) if cat else None
    if entry is not None:
        head = str(entry.get("message") or "").split(":", 1)[0].strip()
        if head in _CATEGORIES:
            return head
    if report.stage == "provisioning":
        return "capacity"
    return None


def _plan_json(p: fitcore.Plan, source: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"shapes": [{"shape": s.shape, "count": s.count, "domain": s.domain}
                                      for s in p.shapes],
                           "price": fitcore.price_str(p.price)}
    if source:
        out["source"] = source
    return out


async def _fit_now(reads: visibility.Reads, report: Report, wl: client.Obj, namespace: str,
                   queue: gating.Queue | None) -> None:
    """Plan the gang on the inventory now; no plan when a read of it was refused."""
    needed = (*fitting.INVENTORY_KINDS, kinds.RESOURCE_CLAIM_TEMPLATE, kinds.FIT_POLICY,
              kinds.NAMESPACE)
    stores = await _stores(reads, needed, {kinds.RESOURCE_CLAIM_TEMPLATE: namespace})
    refused = reads.refused(needed)
    if refused:
        report.no_fit = visibility.no_plan_reason(refused)
        return
    version = await kubeversion.of_server(reads.api, report.problems)
    engine = fitting.StoreEngine(stores, kube_version=version)
    try:
        gang_ = fitting.gang_of(wl, stores)
    except fitcore.InputError as exc:
        report.problems.append(str(exc))
        return
    policies, bad = policy.parse_all(stores[kinds.FIT_POLICY].list())
    report.problems.extend(str(e) for e in bad)
    ns = stores[kinds.NAMESPACE].get(namespace)
    ns_labels = {str(k): str(v) for k, v in gating.labels_of(ns).items()} if ns else {}
    scope = policy.scope(policies, stores[kinds.NODE_SHAPE].list(), namespace=namespace,
                         namespace_labels=ns_labels,
                         cluster_queue=queue.cluster_queue if queue else None,
                         cluster_queue_labels=queue.cluster_queue_labels if queue else {})
    verdict = fitting.decide(engine, gang_, scope)
    result = verdict.result
    assert result is not None
    report.problems.extend(engine.problems)
    per_pod_set: dict[str, list[str]] = {ps.name: [] for ps in gang_.pod_sets}
    other: list[str] = []
    # Each reason goes under the pod set its details name (codes, not wording).
    by_message = {d.message: d for d in result.details}
    for r in (*verdict.messages, *(result.reasons if not verdict.messages else ())):
        detail = by_message.get(r)
        named = detail.pod_set if detail is not None else None
        if named is None or named not in per_pod_set:
            other.append(r)
            continue
        lead = f"pod set {named}: "  # said once, in the heading
        per_pod_set[named].append(r[len(lead):] if r.startswith(lead) else r)
    report.fit = {
        "verdict": result.verdict, "category": result.category, "kubeVersion": version,
        "policyViolation": verdict.violation, "allowed": scope.description,
        "podSets": [{"name": ps.name, "count": ps.count, "reasons": per_pod_set[ps.name]}
                    for ps in gang_.pod_sets],
        "other": other,
        "plan": _plan_json(result.plan) if result.plan else None,
        "rejectedShapes": [{"shape": n, "reason": why} for n, why in result.rejected],
    }
    if report.plan is None and result.plan is not None:
        report.plan = _plan_json(result.plan, "planned now")
