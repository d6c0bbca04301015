"""The uninstall hook (values releaseOnUninstall): a Job running `fitgate release --all`
before and after helm deletes the release, with a ServiceAccount granted exactly the
calls that command makes (rbac.RELEASE_ALL), rendered by the real helm."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from admission.app import cli
from admission.kube import rbac
from tests.chart import openapi
from tests.chart.conftest import NAMESPACE, SCENARIOS, Helm

HOOK = "helm.sh/hook"


def hooks(objects: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {o["kind"]: o for o in objects
            if HOOK in ((o.get("metadata") or {}).get("annotations") or {})}


def test_the_release_objects_leave_the_hooks_out(helm: Helm) -> None:
    """The other chart tests see the release's own objects (`helm template --no-hooks`):
    the hook's ClusterRole is not the one `fitgate serve` runs with."""
    assert hooks(helm.template()) == {}
    assert len(helm.template(hooks=True)) == len(helm.template()) + 4


def test_the_hook_runs_release_all_before_and_after_the_release_is_deleted(
        helm: Helm) -> None:
    found = hooks(helm.template(hooks=True))
    assert sorted(found) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for obj in found.values():
        ann = obj["metadata"]["annotations"]
        assert ann[HOOK] == "pre-delete,post-delete"
        assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
    weights = {k: int(o["metadata"]["annotations"]["helm.sh/hook-weight"])
               for k, o in found.items()}
    assert weights["Job"] > max(w for k, w in weights.items() if k != "Job"), (
        "the RBAC must exist before the Job runs")
    pod = found["Job"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["release", "--all"]
    # The image's entrypoint is `fitgate`: the args parse as the CLI's release command.
    assert cli._parser().parse_args(container["args"]).command == "release"
    assert pod["serviceAccountName"] == found["ServiceAccount"]["metadata"]["name"]
    assert pod["restartPolicy"] == "Never"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    binding = found["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == found["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE,
                                    "name": found["ServiceAccount"]["metadata"]["name"]}]


def test_the_hooks_rbac_is_exactly_what_release_all_declares(helm: Helm) -> None:
    role = hooks(helm.template(hooks=True))["ClusterRole"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    declared = {(kind.group, kind.plural + (f"/{sub}" if sub else ""), verb)
                for (kind, sub), verbs in rbac.RELEASE_ALL.items() for verb in verbs}
    assert granted == declared
    assert not any("*" in g for g in granted)
    assert "resourceNames" not in str(role["rules"])


def test_the_hook_objects_are_valid_against_the_api_schemas(
        helm: Helm, schemas: openapi.Schemas) -> None:
    for obj in hooks(helm.template(hooks=True)).values():
        assert schemas.validate(obj) == [], obj["kind"]


def test_no_hook_when_disabled_or_in_local_development_mode(helm: Helm) -> None:
    assert hooks(helm.template({"releaseOnUninstall": {"enabled": False}}, hooks=True)) == {}
    assert hooks(helm.template(SCENARIOS["external"], hooks=True)) == {}


def test_hook_values_reach_the_job(helm: Helm) -> None:
    job = hooks(helm.template({"releaseOnUninstall": {
        "backoffLimit": 0, "activeDeadlineSeconds": 60}}, hooks=True))["Job"]
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 60)
