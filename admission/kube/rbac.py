"""The API calls fitgate makes, declared once.

Every `Client` implementation refuses a call that is not declared here (`check`), so a unit
test that reaches an undeclared verb fails, and the Helm chart's RBAC is tested against
this table: the chart grants exactly these verbs on these resources, nothing more.
Watch-backed caches need list and watch; `apply` is a patch to the API server.
"""

from __future__ import annotations

from admission.kube import kinds

Verb = str  # get, list, watch, create, patch, update, delete

#: (kind, subresource or "") -> verbs
PERMISSIONS: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    (kinds.NODE, ""): frozenset({"get", "list", "watch"}),
    # FitPolicy subjects select namespaces by label (webhook, gate).
    (kinds.NAMESPACE, ""): frozenset({"get", "list", "watch"}),
    (kinds.POD, ""): frozenset({"get", "list", "watch", "patch"}),
    (kinds.POD_TEMPLATE, ""): frozenset({"get", "list", "watch", "create", "delete"}),
    # The placements of an admitted gang (admission.release), one per Workload uid.
    (kinds.CONFIG_MAP, ""): frozenset({"get", "create", "patch", "delete"}),
    (kinds.EVENT, ""): frozenset({"create", "patch"}),
    (kinds.LEASE, ""): frozenset({"get", "create", "update", "patch"}),
    (kinds.JOB, ""): frozenset({"get", "list", "watch", "patch"}),
    # The gate removes its entry from the owning job's admission-gated-by annotation.
    **{(k, ""): frozenset({"get", "patch"}) for k in kinds.JOB_KINDS if k is not kinds.JOB},
    (kinds.RESOURCE_SLICE, ""): frozenset({"get", "list", "watch"}),
    (kinds.RESOURCE_CLAIM, ""): frozenset({"get", "list", "watch"}),
    (kinds.RESOURCE_CLAIM_TEMPLATE, ""): frozenset({"get", "list", "watch"}),
    (kinds.DEVICE_CLASS, ""): frozenset({"get", "list", "watch"}),
    (kinds.WORKLOAD, ""): frozenset({"get", "list", "watch"}),
    (kinds.WORKLOAD, "status"): frozenset({"patch"}),
    (kinds.ADMISSION_CHECK, ""): frozenset({"get", "list", "watch"}),
    (kinds.ADMISSION_CHECK, "status"): frozenset({"patch"}),
    (kinds.CLUSTER_QUEUE, ""): frozenset({"get", "list", "watch"}),
    (kinds.LOCAL_QUEUE, ""): frozenset({"get", "list", "watch"}),
    (kinds.RESOURCE_FLAVOR, ""): frozenset({"get", "list", "watch"}),
    (kinds.PROVISIONING_REQUEST, ""): frozenset({"get", "list", "watch", "create", "delete"}),
    (kinds.NODE_SHAPE, ""): frozenset({"get", "list", "watch"}),
    (kinds.NODE_SHAPE, "status"): frozenset({"patch"}),
    (kinds.FIT_POLICY, ""): frozenset({"get", "list", "watch"}),
    # The Valid condition on each FitPolicy (admission/policy_status.py).
    (kinds.FIT_POLICY, "status"): frozenset({"patch"}),
}


class Undeclared(Exception):
    """Code called the API in a way `PERMISSIONS` does not declare (and RBAC would refuse)."""


def check(kind: kinds.Kind, verb: Verb, subresource: str | None = None) -> None:
    allowed = PERMISSIONS.get((kind, subresource or ""), frozenset())
    if verb not in allowed:
        target = kind.plural + (f"/{subresource}" if subresource else "")
        raise Undeclared(f"{verb} {kind.group or 'core'}/{target} is not declared in "
                         "admission/kube/rbac.py (and the chart's RBAC would refuse it)")


def cluster_role(name: str = "fitgate") -> dict[str, object]:
    """The ClusterRole granting exactly `PERMISSIONS` (one rule per API group and
    resource; subresources as `resource/subresource`), for the e2e ServiceAccount and for
    comparing the Helm chart's RBAC against."""
    rules = []
    for (kind, sub), verbs in sorted(PERMISSIONS.items(),
                                     key=lambda kv: (kv[0][0].group, kv[0][0].plural,
                                                     kv[0][1])):
        rules.append({"apiGroups": [kind.group],
                      "resources": [kind.plural + (f"/{sub}" if sub else "")],
                      "verbs": sorted(verbs)})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}
