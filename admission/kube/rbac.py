"""The API calls fitgate makes, declared once.

Every `Client` implementation refuses a call that is not declared here (`check`), so a unit
test that reaches an undeclared verb fails, and the Helm chart's RBAC is tested against
this table: the chart grants exactly these verbs on these resources, nothing more.
Watch-backed caches need list and watch; `apply` is a patch to the API server.

The chart reads its rules from `charts/fitgate/files/rbac.yaml`, which `chart_rules()`
generates from these tables (`python -m admission.kube.rbac > charts/fitgate/files/rbac.yaml`;
a test fails when the file and the tables differ). Where a rule goes follows from the
tables: kinds in `OWN_NAMESPACE` go to a Role in fitgate's namespace, the rest to the
ClusterRole; kinds in `NAMED` are granted on one name only; `SELF_MANAGED_CERTS` is granted
only when fitgate manages its own serving certificate.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from admission.kube import kinds

Verb = str  # get, list, watch, create, patch, update, delete

#: (kind, subresource or "") -> verbs
PERMISSIONS: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    (kinds.NODE, ""): frozenset({"get", "list", "watch"}),
    # FitPolicy subjects select namespaces by label (webhook, gate).
    (kinds.NAMESPACE, ""): frozenset({"get", "list", "watch"}),
    (kinds.POD, ""): frozenset({"get", "list", "watch", "patch"}),
    (kinds.POD_TEMPLATE, ""): frozenset({"get", "list", "watch", "create", "delete"}),
    # The placements of an admitted gang (admission.release.reconciler), one per Workload uid.
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
    # The Valid condition on each FitPolicy (admission/policy/status.py).
    (kinds.FIT_POLICY, "status"): frozenset({"patch"}),
}

#: Calls made only when fitgate manages its own serving certificate (chart value
#: `certificates.mode: self-managed`, `admission/certs/keeper.py`): the Secret that holds the CA
#: and the serving certificate, and the caBundle of fitgate's two webhook configurations.
SELF_MANAGED_CERTS: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    (kinds.SECRET, ""): frozenset({"get", "create", "patch"}),
    (kinds.MUTATING_WEBHOOK_CONFIGURATION, ""): frozenset({"get", "patch"}),
    (kinds.VALIDATING_WEBHOOK_CONFIGURATION, ""): frozenset({"get", "patch"}),
}

#: Kinds fitgate touches only in its own namespace: a Role there grants them, never the
#: ClusterRole.
OWN_NAMESPACE: frozenset[kinds.Kind] = frozenset({kinds.LEASE, kinds.SECRET})

#: Kinds fitgate touches under one name only, keyed by the name the chart gives it
#: (`fitgate.names` in the chart's _helpers.tpl). Every verb but create is restricted to
#: that name (resourceNames); RBAC cannot restrict create by name, because the name is not
#: known when a create is authorized.
NAMED: dict[kinds.Kind, str] = {
    kinds.LEASE: "lease",
    kinds.SECRET: "tlsSecret",
    kinds.MUTATING_WEBHOOK_CONFIGURATION: "mutatingWebhook",
    kinds.VALIDATING_WEBHOOK_CONFIGURATION: "validatingWebhook",
}

ALL_PERMISSIONS: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    **PERMISSIONS, **SELF_MANAGED_CERTS}


class Undeclared(Exception):
    """Code called the API in a way `PERMISSIONS` does not declare (and RBAC would refuse)."""


def check(kind: kinds.Kind, verb: Verb, subresource: str | None = None) -> None:
    allowed = ALL_PERMISSIONS.get((kind, subresource or ""), frozenset())
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


def _rules(table: dict[tuple[kinds.Kind, str], frozenset[Verb]], namespaced: bool
           ) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for (kind, sub), verbs in sorted(table.items(),
                                     key=lambda e: (e[0][0].group, e[0][0].plural, e[0][1])):
        if (kind in OWN_NAMESPACE) != namespaced:
            continue
        base = {"apiGroups": [kind.group], "resources": [kind.plural + (f"/{sub}" if sub else "")]}
        name = NAMED.get(kind) if not sub else None
        if name is None:
            rules.append({**base, "verbs": sorted(verbs)})
            continue
        if "create" in verbs:
            rules.append({**base, "verbs": ["create"]})
        if verbs - {"create"}:
            rules.append({**base, "verbs": sorted(verbs - {"create"}), "resourceName": name})
    return rules


def chart_rules() -> dict[str, Any]:
    """The chart's RBAC rules: `clusterRole` and `role` always, `selfManagedCerts` when
    fitgate manages its certificate. A rule with `resourceName` is restricted to the
    object the chart names by that key."""
    return {
        "clusterRole": _rules(PERMISSIONS, namespaced=False),
        "role": _rules(PERMISSIONS, namespaced=True),
        "selfManagedCerts": {
            "clusterRole": _rules(SELF_MANAGED_CERTS, namespaced=False),
            "role": _rules(SELF_MANAGED_CERTS, namespaced=True),
        },
    }


CHART_RULES_HEADER = ("# Generated from admission/kube/rbac.py by `python -m admission.kube.rbac`;"
                      " do not edit.\n")


def render_chart_rules() -> str:
    """The text of charts/fitgate/files/rbac.yaml."""
    return CHART_RULES_HEADER + yaml.safe_dump(chart_rules(), sort_keys=False)


if __name__ == "__main__":
    sys.stdout.write(render_chart_rules())
