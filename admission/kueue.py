"""Pure reads of Kueue objects (Workloads, AdmissionChecks, ProvisioningRequest
conditions), on plain dicts as the API serves them; no I/O.

Every stage reads Kueue's objects the same way through these: whether a Workload holds
quota, was evicted or finished, which AdmissionChecks are fitgate's and their entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from admission import constants as c


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    status = obj.get("status")
    for cond in (status.get("conditions") if isinstance(status, Mapping) else None) or []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def admission(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    adm = (workload.get("status") or {}).get("admission")
    return adm if isinstance(adm, Mapping) else None


def quota_reserved(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, c.QUOTA_RESERVED) and admission(workload) is not None


def evicted(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, c.EVICTED)


def finished(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, c.FINISHED)


def ours(admission_checks: Iterable[Mapping[str, Any]]) -> set[str]:
    """Names of the AdmissionChecks whose controllerName is fitgate's."""
    return {str(ac["metadata"]["name"]) for ac in admission_checks
            if (ac.get("spec") or {}).get("controllerName") == c.CONTROLLER_NAME}


def entries(workload: Mapping[str, Any], names: set[str]) -> list[Mapping[str, Any]]:
    """The Workload's `status.admissionChecks` entries of our checks."""
    status = workload.get("status") or {}
    return [e for e in status.get("admissionChecks") or []
            if isinstance(e, Mapping) and e.get("name") in names]


def one_line(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` bytes (where the API counts bytes: a check's
    message, an Event's note) with an ellipsis."""
    line = " ".join(text.split())
    raw = line.encode()
    if len(raw) <= limit:
        return line
    # The text up to limit - 3 bytes, then the 3-byte ellipsis.
    return raw[:limit - 3].decode(errors="ignore") + "…"
