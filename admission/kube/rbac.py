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
only when fitgate manages its own serving certificate; `KARPENTER` only when it serves
shapes Karpenter serves; `JOB_KIND_VERBS` on a job kind only when the chart's
`webhook.jobKinds` lists it (fitgate gates only those kinds, so it patches only those).

RBAC cannot say which fields of an object a verb may change. What fitgate writes to pods
(only its own scheduling gate removed, its slot annotation and hostname nodeSelector added,
while the pod holds its gate) and to ConfigMaps (only its `fitgate-placement-` ones,
never in the namespaces the webhooks skip) is narrowed further by the chart's
ValidatingAdmissionPolicies (`templates/admissionpolicy.yaml`).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from admission.kube import kinds

Verb = str  # get, list, watch, create, patch, update, delete
#: (kind, subresource or "") -> verbs
Table = dict[tuple[kinds.Kind, str], frozenset[Verb]]

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
    # patch: after a Retry on the domain Kueue's TAS assigned, the domain where the gang
    # fits goes into the pod set's nodeSelector while the Workload holds no quota
    # (admission.check.topology.steer), and the pin into an annotation.
    (kinds.WORKLOAD, ""): frozenset({"get", "list", "watch", "patch"}),
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

#: Calls made only when fitgate serves shapes Karpenter serves (chart value
#: `karpenter.enabled`, config `karpenter`; `admission/check/karpenter.py`): one NodeClaim
#: per planned node, owned by the shape's NodePool (read for its uid and template);
#: do-not-disrupt is dropped from the NodeClaim and from its Node (where Karpenter reads
#: it once the node has registered) when the gang's pods are bound. Events are listed
#: (by field selector, one NodeClaim at a time) when an attempt fails: Karpenter deletes a
#: NodeClaim it cannot launch, and its Event on it is the only record of why.
KARPENTER: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    (kinds.NODE_CLAIM, ""): frozenset({"get", "list", "watch", "create", "patch", "delete"}),
    (kinds.NODE_POOL, ""): frozenset({"get", "list", "watch"}),
    (kinds.NODE, ""): frozenset({"patch"}),
    (kinds.EVENT, ""): frozenset({"list"}),
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

#: Verbs on a job kind granted only when `webhook.jobKinds` lists the kind (the chart's
#: `jobKinds` rules): the gate patches a job to remove its entry from the
#: admission-gated-by annotation, which the webhook added only to those kinds.
JOB_KIND_VERBS: dict[kinds.Kind, frozenset[Verb]] = {
    k: frozenset({"patch"}) if k is kinds.JOB else frozenset({"get", "patch"})
    for k in kinds.JOB_KINDS}


def _union(*tables: dict[tuple[kinds.Kind, str], frozenset[Verb]]
           ) -> dict[tuple[kinds.Kind, str], frozenset[Verb]]:
    out: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {}
    for table in tables:
        for key, verbs in table.items():
            out[key] = out.get(key, frozenset()) | verbs
    return out


ALL_PERMISSIONS: dict[tuple[kinds.Kind, str], frozenset[Verb]] = _union(
    PERMISSIONS, SELF_MANAGED_CERTS, KARPENTER)

#: The calls of `fitgate release --all` (admission/app/release_all.py), which the chart's
#: uninstall hook Job makes with a ServiceAccount of its own, granted exactly these
#: (cluster-wide: gated jobs and pods are in every namespace).
RELEASE_ALL: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    **{(k, ""): frozenset({"get", "list", "patch"}) for k in kinds.JOB_KINDS},
    (kinds.POD, ""): frozenset({"get", "list", "patch"}),
    (kinds.PROVISIONING_REQUEST, ""): frozenset({"list", "delete"}),
    (kinds.POD_TEMPLATE, ""): frozenset({"list", "delete"}),
    (kinds.ADMISSION_CHECK, ""): frozenset({"list"}),
    (kinds.CLUSTER_QUEUE, ""): frozenset({"list"}),
}

#: The calls of `fitgate shape capture` (admission/app/shapes.py), all reads: the node,
#: the nodes of its group and their slices, and what may select on device attributes.
SHAPE_CAPTURE: dict[tuple[kinds.Kind, str], frozenset[Verb]] = {
    (kinds.NODE, ""): frozenset({"get", "list"}),
    (kinds.RESOURCE_SLICE, ""): frozenset({"list"}),
    (kinds.DEVICE_CLASS, ""): frozenset({"list"}),
    (kinds.RESOURCE_CLAIM, ""): frozenset({"list"}),
    (kinds.RESOURCE_CLAIM_TEMPLATE, ""): frozenset({"list"}),
}


class Undeclared(Exception):
    """Code called the API in a way `PERMISSIONS` does not declare (and RBAC would refuse)."""


def check(kind: kinds.Kind, verb: Verb, subresource: str | None = None,
          table: Table | None = None) -> None:
    """Raise `Undeclared` unless `table` (default: every call of `fitgate serve`) declares
    the call."""
    allowed = (ALL_PERMISSIONS if table is None else table).get(
        (kind, subresource or ""), frozenset())
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


def _rules(table: dict[tuple[kinds.Kind, str], frozenset[Verb]], namespaced: bool,
           job_kinds_apart: bool = True) -> list[dict[str, Any]]:
    """`table`'s rules; with `job_kinds_apart`, less the JOB_KIND_VERBS, which the chart
    grants per listed job kind."""
    rules: list[dict[str, Any]] = []
    for (kind, sub), verbs in sorted(table.items(),
                                     key=lambda e: (e[0][0].group, e[0][0].plural, e[0][1])):
        if (kind in OWN_NAMESPACE) != namespaced:
            continue
        if not sub and job_kinds_apart:
            verbs = verbs - JOB_KIND_VERBS.get(kind, frozenset())
            if not verbs:
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
    fitgate manages its certificate, `karpenter` when it serves Karpenter shapes,
    `releaseHook` for the uninstall hook's ServiceAccount. A rule with `resourceName` is
    restricted to the object the chart names by that key."""
    return {
        "clusterRole": _rules(PERMISSIONS, namespaced=False),
        "role": _rules(PERMISSIONS, namespaced=True),
        # ClusterRole rules for the job kinds `webhook.jobKinds` lists (by group and
        # resource).
        "jobKinds": [{"apiGroups": [k.group], "resources": [k.plural],
                      "verbs": sorted(JOB_KIND_VERBS[k])}
                     for k in sorted(JOB_KIND_VERBS, key=lambda k: (k.group, k.plural))],
        "selfManagedCerts": {
            "clusterRole": _rules(SELF_MANAGED_CERTS, namespaced=False),
            "role": _rules(SELF_MANAGED_CERTS, namespaced=True),
        },
        "releaseHook": {"clusterRole": _rules(RELEASE_ALL, namespaced=False,
                                              job_kinds_apart=False)},
        "karpenter": {
            "clusterRole": _rules(KARPENTER, namespaced=False),
            "role": _rules(KARPENTER, namespaced=True),
        },
    }


CHART_RULES_HEADER = ("# Generated from admission/kube/rbac.py by `python -m admission.kube.rbac`;"
                      " do not edit.\n")


def render_chart_rules() -> str:
    """The text of charts/fitgate/files/rbac.yaml."""
    return CHART_RULES_HEADER + yaml.safe_dump(chart_rules(), sort_keys=False)


if __name__ == "__main__":
    sys.stdout.write(render_chart_rules())
