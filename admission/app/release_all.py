"""`fitgate release --all`: take fitgate out of the path of every Job and Pod it holds.

What fitgate puts in the way of a workload, and what this undoes:

- its entry `fitgate.io/topology-fit` in a job's `kueue.x-k8s.io/admission-gated-by`
  annotation (the pre-quota gate, `admission.gate.predicates`): removed from every job of every
  Kueue job kind fitgate knows (kinds whose CRD is not installed are skipped); Kueue then
  drops the annotation from the Workload and may reserve quota;
- its scheduling gate `fitgate.io/placement` on the pods of an admitted gang
  (`admission.release`): removed, without a node pin, so the scheduler places them;
- the ProvisioningRequests and PodTemplates it created (label
  `app.kubernetes.io/managed-by: fitgate`): deleted, so the autoscaler no longer holds
  or adds nodes for them.

It is idempotent (a second run finds nothing) and safe while fitgate still runs: every
gate removal is a JSON patch guarded by a `test` of the value read, retried on the news
when the object changed. It does not touch fitgate's AdmissionChecks or the ClusterQueues
that use them: which queues keep a check is the platform team's configuration. It reports
them instead, because Kueue admits nothing in a ClusterQueue whose check has no controller
(docs/platform-guide.md, "Break glass").

The chart runs it as a pre-delete and post-delete hook Job (`releaseOnUninstall`), with a
ServiceAccount granted exactly `admission.kube.rbac.RELEASE_ALL`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from admission import constants as c
from admission.gate import predicates as gating
from admission.kube import client, errors, kinds
from admission.release import reconciler as release

#: Attempts per object when it changes between the read and the guarded patch.
PATCH_ATTEMPTS = 5
#: The label selectors of the pods fitgate gates (admission.release.workload_uid).
POD_SELECTORS = (c.PLACEMENT_LABEL, c.PLACEMENT_WORKLOAD_LABEL)
MANAGED_SELECTOR = f"{c.MANAGED_LABEL}=fitgate"


@dataclasses.dataclass
class Report:
    """What `release_all` changed (or would change, in a dry run), as
    `Kind namespace/name` strings, and what it left for a person to decide."""

    jobs: list[str] = dataclasses.field(default_factory=list)
    pods: list[str] = dataclasses.field(default_factory=list)
    provisioning_requests: list[str] = dataclasses.field(default_factory=list)
    pod_templates: list[str] = dataclasses.field(default_factory=list)
    #: Job kinds not served by this cluster (their CRD is not installed).
    kinds_not_served: list[str] = dataclasses.field(default_factory=list)
    #: ClusterQueue -> fitgate AdmissionChecks it still uses.
    cluster_queues: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_text(self, dry_run: bool = False) -> str:
        remove, delete = ("would remove", "would delete") if dry_run else ("removed", "deleted")
        lines = [
            f"{remove} fitgate's admission gate from {len(self.jobs)} job(s)",
            f"{remove} fitgate's scheduling gate from {len(self.pods)} pod(s)",
            f"{delete} {len(self.provisioning_requests)} ProvisioningRequest(s) and "
            f"{len(self.pod_templates)} PodTemplate(s) fitgate created",
        ]
        lines += [f"  {what}" for what in (*self.jobs, *self.pods,
                                            *self.provisioning_requests, *self.pod_templates)]
        for cq, checks in sorted(self.cluster_queues.items()):
            lines.append(f"note: ClusterQueue {cq} still uses fitgate's AdmissionCheck "
                         f"{', '.join(checks)}: Kueue admits nothing there without fitgate "
                         "running; remove the check from its "
                         "spec.admissionChecksStrategy to admit without it")
        return "\n".join(lines)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _ref(kind: kinds.Kind, obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{kind.kind} {meta.get('namespace')}/{meta.get('name')}"


async def _ungate(api: client.Client, kind: kinds.Kind, obj: client.Obj,
                  ops_of: Any, dry_run: bool) -> bool:
    """Apply `ops_of(obj)` to the object, reading it again when it changed under us;
    whether there was anything to remove."""
    meta = _meta(obj)
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    current = obj
    for _ in range(PATCH_ATTEMPTS):
        ops = ops_of(current)
        if not ops:
            return False  # removed by someone else meanwhile
        if dry_run:
            return True
        try:
            await api.patch(kind, name, ops, namespace=namespace, patch_type="json")
            return True
        except errors.NotFound:
            return False
        except errors.ApiError as exc:
            if exc.status not in (409, 422):
                raise
        try:
            current = await api.get(kind, name, namespace)
        except errors.NotFound:
            return False
    raise errors.ApiError(409, "Conflict", f"{kind.kind} {namespace}/{name}: changed on "
                          f"each of {PATCH_ATTEMPTS} attempts to remove fitgate's gate")


async def _list(api: client.Client, kind: kinds.Kind, label_selector: str | None = None
                ) -> list[client.Obj] | None:
    """Every object of the kind in every namespace; None when the kind is not served."""
    try:
        return (await api.list(kind, None, label_selector=label_selector)).items
    except errors.NotFound:
        return None


async def release_all(api: client.Client, *, dry_run: bool = False,
                      job_kinds: tuple[kinds.Kind, ...] = kinds.JOB_KINDS) -> Report:
    """Remove fitgate's gates from every job and pod, delete its ProvisioningRequests and
    PodTemplates (see the module docstring); `dry_run` only reports."""
    report = Report()
    for kind in job_kinds:
        jobs = await _list(api, kind)
        if jobs is None:
            report.kinds_not_served.append(f"{kind.api_version}/{kind.kind}")
            continue
        for job in jobs:
            if gating.gated_by_us(job) and await _ungate(
                    api, kind, job, gating.remove_gate_patch, dry_run):
                report.jobs.append(_ref(kind, job))
    seen: set[tuple[str, str]] = set()
    for selector in POD_SELECTORS:
        for pod in await _list(api, kinds.POD, selector) or []:
            key = (str(_meta(pod).get("namespace")), str(_meta(pod).get("name")))
            if key in seen:
                continue
            seen.add(key)
            if release._gate_index(pod) is not None and await _ungate(
                    api, kinds.POD, pod, release._release_ops, dry_run):
                report.pods.append(_ref(kinds.POD, pod))
    for kind, out in ((kinds.PROVISIONING_REQUEST, report.provisioning_requests),
                      (kinds.POD_TEMPLATE, report.pod_templates)):
        for obj in await _list(api, kind, MANAGED_SELECTOR) or []:
            meta = _meta(obj)
            if not dry_run:
                try:
                    await api.delete(kind, str(meta.get("name")), str(meta.get("namespace")))
                except errors.NotFound:
                    continue
            out.append(_ref(kind, obj))
    ours = gating.our_checks(await _list(api, kinds.ADMISSION_CHECK) or [])
    for cq in await _list(api, kinds.CLUSTER_QUEUE) or []:
        used = sorted(n for n in gating.cluster_queue_checks(cq) if n in ours)
        if used:
            report.cluster_queues[str(_meta(cq).get("name"))] = used
    return report
