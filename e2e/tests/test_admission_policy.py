"""The chart's ValidatingAdmissionPolicies on a real API server (issue #20 item 10):
fitgate's ServiceAccount, which RBAC lets patch any pod and write ConfigMaps anywhere,
may only release its own scheduling gate (adding its slot annotation and hostname
nodeSelector) on pods that hold it, and write only its placement ConfigMaps outside the
namespaces the webhooks skip. Other users are not affected.

The chart is installed with `externalWebhook.url` (no Deployment); the calls are made
with a token of the chart's ServiceAccount (`kubectl create token`).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.tests.test_chart import CHART, Tools, _token_kubeconfig, _values_args
from e2e.tests.test_chart import tools as tools

pytestmark = [pytest.mark.e2e]

NAMESPACE = "fitgate-vap-e2e"
TEAM = "fitgate-vap-team"
RELEASE = "fitgate-vap"
GATE = "fitgate.io/placement"
OTHER_GATE = "example.com/other"


@pytest.fixture(scope="module")
def installed(tools: Tools, e2e_cluster: Any,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """The chart installed; yields a kubeconfig holding its ServiceAccount's token."""
    for ns in (NAMESPACE, TEAM):
        tools.kubectl("create", "namespace", ns)
    values = {"externalWebhook": {"url": "https://127.0.0.1:9443", "caBundle": "Q0EK"},
              "admissionCheck": {"create": False}}
    tools.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--timeout", "120s",
               *_values_args(values))
    sa = RELEASE  # the chart's full name: the release name contains "fitgate"
    try:
        if e2e_cluster.local is not None:
            kubeconfig = e2e_cluster.local.token_for(sa, NAMESPACE, duration="10m").kubeconfig
        else:
            token = tools.kubectl("create", "token", sa, "-n", NAMESPACE,
                                  "--duration=10m").stdout.strip()
            kubeconfig = _token_kubeconfig(tools, token, tmp_path_factory.mktemp("vap")
                                           / "fitgate.kubeconfig")
        yield pathlib.Path(kubeconfig)
    finally:
        tools.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--timeout", "120s",
                   check=False)
        for ns in (NAMESPACE, TEAM):
            tools.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false",
                          check=False)


def pod(name: str, gates: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": TEAM, "labels": {"app": "train"},
                         "annotations": {"team": "a"}},
            "spec": {"schedulingGates": [{"name": g} for g in gates],
                     "containers": [{"name": "main", "image": "registry.example.com/x:1"}]}}


def configmap(name: str, namespace: str = TEAM) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "namespace": namespace},
                       "data": {"placements": "[]"}})


def as_fitgate(tools: Tools, kubeconfig: pathlib.Path, *args: str,
               input_text: str | None = None) -> tuple[bool, str]:
    proc = tools.kubectl(*args, input_text=input_text, check=False, kubeconfig=kubeconfig)
    return proc.returncode == 0, proc.stderr


def patch_pod(tools: Tools, kubeconfig: pathlib.Path, name: str, ops: list[dict[str, Any]]
              ) -> tuple[bool, str]:
    return as_fitgate(tools, kubeconfig, "patch", "pod", name, "-n", TEAM, "--type=json",
                      "-p", json.dumps(ops))


@pytest.mark.timeout(300)
def test_fitgate_may_only_release_its_own_gate_and_write_its_own_configmaps(
        tools: Tools, installed: pathlib.Path) -> None:
    kc = installed
    tools.kubectl("apply", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List",
         "items": [pod("held", [GATE, OTHER_GATE]), pod("foreign", [OTHER_GATE])]}))
    # The policies take effect once the API server has loaded them: probe with a write
    # they refuse and RBAC allows (bounded; an early success is undone as admin).
    for _ in range(120):
        ok, err = as_fitgate(tools, kc, "create", "-f", "-",
                             input_text=configmap("not-fitgates"))
        if not ok:
            break
        tools.kubectl("delete", "configmap", "not-fitgates", "-n", TEAM)
        time.sleep(0.5)
    assert not ok and "fitgate writes only its placement ConfigMaps" in err, err

    refused: list[tuple[str, list[dict[str, Any]], str]] = [
        ("held", [{"op": "remove", "path": "/spec/schedulingGates/1"}],
         "removes only its own scheduling gate"),
        ("held", [{"op": "replace", "path": "/metadata/labels/app", "value": "x"}],
         "does not change a pod's labels"),
        ("held", [{"op": "add", "path": "/metadata/annotations/team", "value": "b"}],
         "only sets the fitgate.io/slot annotation"),
        ("held", [{"op": "add", "path": "/spec/nodeSelector", "value": {"zone": "z"}}],
         "only adds the kubernetes.io/hostname nodeSelector"),
        ("held", [{"op": "add", "path": "/spec/tolerations/-",
                   "value": {"key": "example.com/any", "operator": "Exists"}}],
         "does not change a pod's containers, tolerations"),
        ("foreign", [{"op": "add", "path": "/metadata/annotations/fitgate.io~1slot",
                      "value": "w/0"}],
         "only pods that hold its scheduling gate"),
    ]
    for name, ops, message in refused:
        ok, err = patch_pod(tools, kc, name, ops)
        assert not ok and message in err, (name, ops, err)

    # What fitgate does (admission/release/reconciler.py): pin to the node, note the slot, release.
    ok, err = patch_pod(tools, kc, "held", [
        {"op": "add", "path": "/metadata/annotations/fitgate.io~1slot", "value": "w/0"},
        {"op": "add", "path": "/spec/nodeSelector",
         "value": {"kubernetes.io/hostname": "node-1"}},
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": GATE},
        {"op": "remove", "path": "/spec/schedulingGates/0"}])
    assert ok, err
    live = json.loads(tools.kubectl("get", "pod", "held", "-n", TEAM, "-o", "json").stdout)
    assert [g["name"] for g in live["spec"]["schedulingGates"]] == [OTHER_GATE]
    assert live["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-1"}
    # Released, the pod is no longer fitgate's to change.
    ok, err = patch_pod(tools, kc, "held", [
        {"op": "replace", "path": "/metadata/annotations/fitgate.io~1slot", "value": "w/1"}])
    assert not ok and "only pods that hold its scheduling gate" in err, err

    # Its placement ConfigMaps, and only outside the namespaces the webhooks skip.
    name = "fitgate-placement-0b7c"
    assert as_fitgate(tools, kc, "create", "-f", "-", input_text=configmap(name))[0]
    assert as_fitgate(tools, kc, "patch", "configmap", name, "-n", TEAM, "--type=merge",
                      "-p", '{"data":{"placements":"[1]"}}')[0]
    assert as_fitgate(tools, kc, "delete", "configmap", name, "-n", TEAM)[0]
    ok, err = as_fitgate(tools, kc, "create", "-f", "-",
                         input_text=configmap(name, "kube-system"))
    assert not ok and "namespaces its webhooks skip" in err, err

    # Anyone else is not affected.
    tools.kubectl("patch", "pod", "foreign", "-n", TEAM, "--type=merge",
                  "-p", '{"metadata":{"labels":{"app":"y"}}}')
