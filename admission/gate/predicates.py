"""Names and pure predicates of the pre-quota path: the admission gate, the job kinds Kueue
manages, and which queues use fitgate's AdmissionCheck.

Kueue keeps a Workload out of admission while its annotation
`kueue.x-k8s.io/admission-gated-by` names a gate (a comma-separated list; Kueue trims
spaces, refuses empty or duplicate entries). For a Workload owned by a Job the Job is the
source of truth: Kueue copies the Job's annotation to the Workload and deletes it from the
Workload once the Job has none. So the webhook adds `fitgate.io/topology-fit` to the Job
at CREATE (the only time an entry may be added), and the gate controller removes only that
entry from the Job.

Everything here is a pure function of plain dicts (or of the stores passed in), so the
webhook, the gate controller and `fitgate explain` agree on one reading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from admission import constants
from admission.kube import kinds, store

#: The gate's name, and the AdmissionCheck controllerName fitgate serves.
GATE = "fitgate.io/topology-fit"
CONTROLLER_NAME = constants.CONTROLLER_NAME
GATED_BY = "kueue.x-k8s.io/admission-gated-by"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
#: On the owning Job: the gate's last verdict, JSON, read by `fitgate explain`.
EXPLANATION = "fitgate.io/explanation"


def job_kind(text: str) -> kinds.Kind:
    """A job kind by `group/version/Kind` (`version/Kind` for the core group), among the
    kinds fitgate declares API calls on (the gate must be able to patch what the webhook
    gates)."""
    parts = text.split("/")
    if len(parts) == 2:
        parts = ["", *parts]
    if len(parts) != 3 or not all(parts[1:]):
        raise ValueError(f"job kind {text!r}: expected group/version/Kind")
    for k in kinds.JOB_KINDS:
        if (k.group, k.version, k.kind) == tuple(parts):
            return k
    known = ", ".join(f"{k.api_version}/{k.kind}" for k in kinds.JOB_KINDS)
    raise ValueError(f"job kind {text!r}: fitgate declares no API calls on it "
                     f"(admission/kube/rbac.py); known: {known}")


#: The Kueue job kinds whose Workloads fitgate gates (the webhook configuration's rules
#: choose which of them the API server sends).
DEFAULT_JOB_KINDS: tuple[kinds.Kind, ...] = kinds.JOB_KINDS


# ------------------------------------------------------------------- the annotation


def gates(value: str | None) -> list[str]:
    """The entries of an admission-gated-by value, as Kueue reads them (trimmed, empty
    entries dropped)."""
    if not value:
        return []
    return [g.strip() for g in value.split(",") if g.strip()]


def with_gate(value: str | None, gate: str = GATE) -> str:
    """The value with `gate` added after the existing entries (none duplicated)."""
    have = gates(value)
    out: list[str] = []
    for g in [*have, gate]:
        if g not in out:
            out.append(g)
    return ",".join(out)


def without_gate(value: str | None, gate: str = GATE) -> str:
    """The value with `gate` removed (every other entry kept, in order)."""
    return ",".join(g for g in gates(value) if g != gate)


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return ann if isinstance(ann, Mapping) else {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    lab = meta.get("labels") if isinstance(meta, Mapping) else None
    return lab if isinstance(lab, Mapping) else {}


def gated_by_us(obj: Mapping[str, Any], gate: str = GATE) -> bool:
    value = annotations_of(obj).get(GATED_BY)
    return isinstance(value, str) and gate in gates(value)


def escape_pointer(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def add_gate_patch(obj: Mapping[str, Any], gate: str = GATE) -> list[dict[str, Any]]:
    """JSONPatch operations that add `gate` to the object's admission-gated-by annotation;
    empty when it is already there."""
    ann = annotations_of(obj)
    value = ann.get(GATED_BY)
    current = value if isinstance(value, str) else None
    if current is not None and gate in gates(current):
        return []
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("annotations"), Mapping):
        return [{"op": "add", "path": "/metadata/annotations",
                 "value": {GATED_BY: with_gate(None, gate)}}]
    return [{"op": "add", "path": f"/metadata/annotations/{escape_pointer(GATED_BY)}",
             "value": with_gate(current, gate)}]


def remove_gate_patch(obj: Mapping[str, Any], gate: str = GATE) -> list[dict[str, Any]]:
    """JSONPatch operations that remove only `gate` from the annotation (the whole
    annotation when it was the last entry), guarded by a `test` of the value read, so a
    concurrent change makes the patch fail instead of being overwritten."""
    value = annotations_of(obj).get(GATED_BY)
    if not isinstance(value, str) or gate not in gates(value):
        return []
    path = f"/metadata/annotations/{escape_pointer(GATED_BY)}"
    rest = without_gate(value, gate)
    ops: list[dict[str, Any]] = [{"op": "test", "path": path, "value": value}]
    if rest:
        ops.append({"op": "replace", "path": path, "value": rest})
    else:
        ops.append({"op": "remove", "path": path})
    return ops


# -------------------------------------------------------------------------- queues


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The LocalQueue a job names (label, or the older annotation of the same key)."""
    for source in (labels_of(obj), annotations_of(obj)):
        value = source.get(QUEUE_LABEL)
        if isinstance(value, str) and value:
            return value
    return None


def cluster_queue_checks(cq: Mapping[str, Any]) -> list[str]:
    """AdmissionCheck names a ClusterQueue uses: v1beta2
    `spec.admissionChecksStrategy.admissionChecks[].name`, and v1beta1's
    `spec.admissionChecks` (a list of names) when present."""
    spec = cq.get("spec")
    if not isinstance(spec, Mapping):
        return []
    out: list[str] = []
    strategy = spec.get("admissionChecksStrategy")
    if isinstance(strategy, Mapping):
        for entry in strategy.get("admissionChecks") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                out.append(entry["name"])
    legacy = spec.get("admissionChecks")
    if isinstance(legacy, list):
        out.extend(n for n in legacy if isinstance(n, str))
    return out


def our_checks(admission_checks: Iterable[Mapping[str, Any]],
               controller: str = CONTROLLER_NAME) -> set[str]:
    """Names of the AdmissionChecks served by fitgate's controller."""
    out = set()
    for ac in admission_checks:
        spec = ac.get("spec")
        if isinstance(spec, Mapping) and spec.get("controllerName") == controller:
            name = (ac.get("metadata") or {}).get("name")
            if isinstance(name, str):
                out.add(name)
    return out


@dataclasses.dataclass(frozen=True)
class Queue:
    """Where a job in a namespace is queued, and whether fitgate's check guards it."""

    local_queue: str
    cluster_queue: str | None
    cluster_queue_labels: Mapping[str, str]
    checks: tuple[str, ...]  # fitgate's AdmissionChecks the ClusterQueue uses

    @property
    def ours(self) -> bool:
        return bool(self.checks)


class Queues:
    """LocalQueue → ClusterQueue → AdmissionCheck lookups over watch-backed stores."""

    def __init__(self, local_queues: store.Store, cluster_queues: store.Store,
                 admission_checks: store.Store, controller: str = CONTROLLER_NAME) -> None:
        self.local_queues = local_queues
        self.cluster_queues = cluster_queues
        self.admission_checks = admission_checks
        self.controller = controller

    def resolve(self, namespace: str, local_queue: str) -> Queue:
        lq = self.local_queues.get(local_queue, namespace)
        spec = lq.get("spec") if lq is not None else None
        cq_name = spec.get("clusterQueue") if isinstance(spec, Mapping) else None
        if not isinstance(cq_name, str) or not cq_name:
            return Queue(local_queue, None, {}, ())
        cq = self.cluster_queues.get(cq_name)
        if cq is None:
            return Queue(local_queue, cq_name, {}, ())
        ours = our_checks(self.admission_checks.list(), self.controller)
        used = tuple(n for n in cluster_queue_checks(cq) if n in ours)
        cq_labels = {str(k): str(v) for k, v in labels_of(cq).items()}
        return Queue(local_queue, cq_name, cq_labels, used)

    def of(self, obj: Mapping[str, Any], namespace: str) -> Queue | None:
        """The queue of a job (None when it names no LocalQueue)."""
        name = queue_name(obj)
        return self.resolve(namespace, name) if name else None


def owner(obj: Mapping[str, Any], job_kinds: Sequence[kinds.Kind]
          ) -> tuple[kinds.Kind, str] | None:
    """The controlling owner of a Workload among the job kinds: (kind, name)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    if not isinstance(refs, list):
        return None
    by_gvk = {(k.api_version, k.kind): k for k in job_kinds}
    fallback = None
    for ref in refs:
        if not isinstance(ref, Mapping):
            continue
        jk = by_gvk.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
        name = ref.get("name")
        if jk is None or not isinstance(name, str):
            continue
        if ref.get("controller"):
            return jk, name
        fallback = fallback or (jk, name)
    return fallback

