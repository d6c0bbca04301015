"""What `fitgate explain` could read, and what it says without the rest.

`fitgate explain` runs with the user's own credentials (`kubectl fitgate explain`), and a
data scientist may read only their namespace. A read the API server refuses (403, 401)
is never taken for an empty list: planning on an inventory without its Nodes would print
a plan for an empty cluster. `Reads` wraps the client for one explain: a refused read
returns None and is remembered as `Unseen` (kind, scope, status, the server's message);
a kind the server does not serve (404 on a list: no NodeShape CRD) reads as empty, as
it is; an unreachable server (status 0) is raised, for the CLI to say so.

The report then states what it could not see and why there is no plan now, and says
what the Job's and the Workload's own annotations and conditions tell: the gate's
explanation (`fitgate.io/explanation`: verdict, category, reasons, when), the
AdmissionCheck entry's state and message, and the quota reservation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from admission.kube import client, errors, kinds


@dataclasses.dataclass(frozen=True)
class Unseen:
    kind: kinds.Kind
    verb: str  # get or list
    namespace: str | None  # None: cluster-scoped, or every namespace
    status: int  # the API server's HTTP status
    message: str

    def scope(self) -> str:
        if self.namespace:
            return f"in namespace {self.namespace}"
        return "in any namespace" if self.kind.namespaced else "cluster-scoped"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.kind, "resource": self.kind.plural, "group": self.kind.group,
                "verb": self.verb, "namespace": self.namespace, "status": self.status,
                "message": self.message}


class Reads:
    """The client calls of one explain, with refusals remembered (module docstring)."""

    def __init__(self, api: client.Client) -> None:
        self.api = api
        self.unseen: list[Unseen] = []

    def _refused(self, exc: errors.ApiError, kind: kinds.Kind, verb: str,
                 namespace: str | None) -> None:
        if exc.status == 0:  # unreachable: not a matter of permissions
            raise exc
        self.unseen.append(Unseen(kind, verb, namespace, exc.status,
                                  exc.message[:300]))

    async def list(self, kind: kinds.Kind, namespace: str | None = None,
                   label_selector: str | None = None) -> list[client.Obj] | None:
        """The objects, [] when the kind is not served, None when the read was refused."""
        try:
            return (await self.api.list(kind, namespace, label_selector=label_selector)).items
        except errors.NotFound:
            return []
        except errors.ApiError as exc:
            self._refused(exc, kind, "list", namespace)
            return None

    async def get(self, kind: kinds.Kind, name: str, namespace: str | None = None
                  ) -> client.Obj | None:
        """The object; raises errors.NotFound; None when the read was refused."""
        try:
            return await self.api.get(kind, name, namespace)
        except errors.NotFound:
            raise
        except errors.ApiError as exc:
            self._refused(exc, kind, "get", namespace)
            return None

    def refused(self, kinds_: Sequence[kinds.Kind]) -> Sequence[Unseen]:
        want = {k.kind for k in kinds_}
        return [u for u in self.unseen if u.kind.kind in want]


def no_plan_reason(unseen: Sequence[Unseen]) -> str:
    """Why explain makes no plan now, naming the kinds it could not read."""
    names = ", ".join(dict.fromkeys(u.kind.plural for u in unseen))
    return (f"no plan now: planning needs {names}, which these credentials may not read; "
            "what follows comes from the Job's and the Workload's own annotations and "
            "conditions")


def unseen_lines(unseen: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text block of what explain could not see."""
    if not unseen:
        return []
    statuses = sorted({int(u["status"]) for u in unseen})
    out = ["could not see (the API server refused these reads, status "
           + ", ".join(map(str, statuses)) + "; not read as empty):"]
    for u in unseen:
        scope = (f"in namespace {u['namespace']}" if u.get("namespace") else
                 "cluster-wide")
        group = f".{u['group']}" if u.get("group") else ""
        out.append(f"  - {u['verb']} {u['resource']}{group} {scope}")
    return out


def quota(wl: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload's quota reservation, from its QuotaReserved condition and admission."""
    status = wl.get("status") if isinstance(wl.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    cond = next((x for x in status.get("conditions") or []
                 if isinstance(x, Mapping) and x.get("type") == "QuotaReserved"), None)
    admission = status.get("admission")
    cq = admission.get("clusterQueue") if isinstance(admission, Mapping) else None
    reserved = isinstance(cond, Mapping) and cond.get("status") == "True"
    return {"reserved": reserved, "clusterQueue": cq if reserved else None,
            "reason": (cond or {}).get("reason") or None,
            "message": (cond or {}).get("message") or None}


def quota_line(q: Mapping[str, Any] | None) -> list[str]:
    if not q:
        return []
    if q.get("reserved"):
        where = f" in ClusterQueue {q['clusterQueue']}" if q.get("clusterQueue") else ""
        return [f"quota: reserved{where}"]
    why = ": ".join(str(x) for x in (q.get("reason"), q.get("message")) if x)
    return ["quota: not reserved" + (f" ({why})" if why else "")]


def gate_reason_lines(explanation: Mapping[str, Any]) -> list[str]:
    """The gate's own reasons (when no fit is made now, they are the why)."""
    reasons = explanation.get("reasons")
    if not isinstance(reasons, list):
        return []
    verdict = explanation.get("verdict")
    head = f"  the gate's verdict: {verdict}" if verdict else "  the gate's reasons:"
    return [head, *(f"  - {str(r)[:2000]}" for r in reasons[:50])]


def check_entries(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every admission check entry of a Workload's status (name, state, message)."""
    return [{"name": e.get("name"), "state": e.get("state", "Pending"),
             "message": e.get("message", ""), "retryCount": e.get("retryCount", 0)}
            for e in status.get("admissionChecks") or [] if isinstance(e, Mapping)]


def guess_entry(entries: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Without the AdmissionChecks (which name which controller), the entry that decides
    the stage: a Rejected one, else one not Ready; None when all are Ready."""
    for state in ("Rejected", "Retry", "Pending"):
        for e in entries:
            if e.get("state") == state:
                return e
    return None
