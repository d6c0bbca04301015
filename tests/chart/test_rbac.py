"""The chart grants exactly the API calls fitgate makes (admission/kube/rbac.py), in both
directions: nothing the code does is refused, nothing it does not do is granted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import yaml

from admission.kube import kinds, rbac
from tests.chart.conftest import (
    CHART,
    NAMESPACE,
    SCENARIOS,
    Helm,
    cert_mode,
    config_of,
    env_of,
    one,
)

Grant = tuple[str, str, str, str | None]  # (apiGroup, resource[/sub], verb, name or None)


def _granted(rules: Sequence[Mapping[str, Any]]) -> set[Grant]:
    out: set[Grant] = set()
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        names = rule.get("resourceNames") or [None]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in names:
                        out.add((group, resource, verb, name))
    return out


def _declared(table: Mapping[tuple[kinds.Kind, str], frozenset[str]], namespaced: bool,
              names: Mapping[str, str]) -> set[Grant]:
    out: set[Grant] = set()
    for (kind, sub), verbs in table.items():
        if (kind in rbac.OWN_NAMESPACE) != namespaced:
            continue
        resource = kind.plural + (f"/{sub}" if sub else "")
        key = rbac.NAMED.get(kind) if not sub else None
        for verb in verbs:
            name = names[key] if key is not None and verb != "create" else None
            out.add((kind.group, resource, verb, name))
    return out


def _names(objects: list[dict]) -> dict[str, str]:
    """The names fitgate uses, as it will read them (its configuration) and as the chart
    created them (the webhook configurations)."""
    return {
        "lease": config_of(objects)["lease_name"],
        "tlsSecret": env_of(objects).get("FITGATE_CERT_SECRET", ""),
        "mutatingWebhook": one(objects, "MutatingWebhookConfiguration")["metadata"]["name"],
        "validatingWebhook": one(objects, "ValidatingWebhookConfiguration")["metadata"]["name"],
    }


def test_the_chart_rules_file_is_generated_from_rbac_py() -> None:
    text = (CHART / "files" / "rbac.yaml").read_text()
    assert text == rbac.render_chart_rules(), (
        "charts/fitgate/files/rbac.yaml is stale: run "
        "`.venv/bin/python -m admission.kube.rbac > charts/fitgate/files/rbac.yaml`")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_granted_equals_declared(helm: Helm, scenario: str) -> None:
    objects = helm.template(SCENARIOS[scenario])
    names = _names(objects)
    tables = [rbac.PERMISSIONS]
    if cert_mode(objects) == "self-managed":
        tables.append(rbac.SELF_MANAGED_CERTS)
    if config_of(objects).get("karpenter"):
        tables.append(rbac.KARPENTER)
    cluster = one(objects, "ClusterRole")
    role = one(objects, "Role")
    want_cluster = set().union(*(_declared(t, False, names) for t in tables))
    want_role = set().union(*(_declared(t, True, names) for t in tables))
    got_cluster = _granted(cluster["rules"])
    got_role = _granted(role["rules"])
    assert got_cluster - want_cluster == set(), "granted cluster-wide but never used"
    assert want_cluster - got_cluster == set(), "used but not granted cluster-wide"
    assert got_role - want_role == set(), "granted in the namespace but never used"
    assert want_role - got_role == set(), "used but not granted in the namespace"
    assert role["metadata"]["namespace"] == NAMESPACE


def test_no_wildcards_and_no_secret_outside_self_managed_mode(helm: Helm) -> None:
    for scenario, values in SCENARIOS.items():
        objects = helm.template(values)
        grants = _granted(one(objects, "ClusterRole")["rules"]) | _granted(
            one(objects, "Role")["rules"])
        assert not any("*" in (g, r, v) for g, r, v, _ in grants), scenario
        secrets = {g for g in grants if g[1] == "secrets"}
        if cert_mode(objects) == "self-managed":
            assert secrets == {("", "secrets", "create", None),
                               ("", "secrets", "get", _names(objects)["tlsSecret"]),
                               ("", "secrets", "patch", _names(objects)["tlsSecret"])}
        else:
            assert secrets == set(), scenario
            assert not any(g[0] == "admissionregistration.k8s.io" for g in grants), scenario


def test_bindings_name_the_roles_and_the_service_account(helm: Helm) -> None:
    objects = helm.template()
    sa = one(objects, "ServiceAccount")["metadata"]
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        b = one(objects, binding)
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role,
                                "name": one(objects, role)["metadata"]["name"]}
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"],
                                  "namespace": NAMESPACE}]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["name"]


def test_the_rules_file_puts_named_and_namespaced_kinds_where_rbac_py_says() -> None:
    rules = yaml.safe_load((CHART / "files" / "rbac.yaml").read_text())
    role_resources = {r["resources"][0] for r in rules["role"]}
    assert role_resources == {"leases"}
    assert {r["resources"][0] for r in rules["selfManagedCerts"]["role"]} == {"secrets"}
    for section in (rules["role"], rules["selfManagedCerts"]["role"],
                    rules["selfManagedCerts"]["clusterRole"]):
        for rule in section:
            assert ("resourceName" in rule) == (rule["verbs"] != ["create"]), rule


@pytest.mark.parametrize("listed", [["jobs"], ["jobsets", "rayjobs"], []],
                         ids=["batch-only", "two", "none"])
def test_job_kinds_are_patched_only_when_listed(helm: Helm, listed: list[str]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    kinds_ = [k for k in values["webhook"]["jobKinds"] if k["resource"] in listed]
    objects = helm.template({"webhook.jobKinds": kinds_})
    grants = _granted(one(objects, "ClusterRole")["rules"])
    for kind in kinds.JOB_KINDS:
        got = {v for g, r, v, _ in grants if (g, r) == (kind.group, kind.plural)}
        want = set(rbac.PERMISSIONS[(kind, "")])
        if kind.plural not in listed:
            want -= rbac.JOB_KIND_VERBS[kind]
        assert got == want, (kind.plural, got, want)
    # batch Jobs are watched whatever is listed (the gate reads them); patched only if listed.
    assert ("batch", "jobs", "watch", None) in grants
    assert (("batch", "jobs", "patch", None) in grants) == ("jobs" in listed)
