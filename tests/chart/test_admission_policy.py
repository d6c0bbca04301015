"""The chart's ValidatingAdmissionPolicies (issue #20 item 10), rendered by the real helm:
matched to fitgate's ServiceAccount only, pods and ConfigMaps, bound with Deny, the
skipped namespaces listed; off with serviceAccount.restrictWrites=false. Their effect on
a real API server: e2e/tests/test_admission_policy.py."""

from __future__ import annotations

from typing import Any

from tests.chart.conftest import NAMESPACE, Helm, by_kind


def policies(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in by_kind(objects, "ValidatingAdmissionPolicy")}


def test_two_policies_bound_with_deny_for_the_service_account_only(helm: Helm) -> None:
    objects = helm.template()
    found = policies(objects)
    assert sorted(found) == ["fitgate-configmaps", "fitgate-pods"]
    sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    for policy in found.values():
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        (condition,) = policy["spec"]["matchConditions"]
        assert condition["expression"] == (
            f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{sa}"')
    bindings = {b["spec"]["policyName"]: b["spec"]["validationActions"]
                for b in by_kind(objects, "ValidatingAdmissionPolicyBinding")}
    assert bindings == {name: ["Deny"] for name in found}
    (rule,) = found["fitgate-pods"]["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["UPDATE"])
    (rule,) = found["fitgate-configmaps"]["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (
        ["configmaps"], ["CREATE", "UPDATE", "DELETE"])


def test_configmaps_are_kept_out_of_the_skipped_namespaces(helm: Helm) -> None:
    found = policies(helm.template({"webhook.excludeNamespaces": ["kube-system", "infra"]}))
    expressions = [v["expression"] for v in found["fitgate-configmaps"]["spec"]["validations"]]
    assert f"!(request.namespace in ['{NAMESPACE}','kube-system','infra'])" in expressions
    assert "request.name.startsWith('fitgate-placement-')" in expressions


def test_restrict_writes_can_be_turned_off(helm: Helm) -> None:
    objects = helm.template({"serviceAccount.restrictWrites": False})
    assert not by_kind(objects, "ValidatingAdmissionPolicy")
    assert not by_kind(objects, "ValidatingAdmissionPolicyBinding")
