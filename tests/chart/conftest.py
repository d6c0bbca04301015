"""Fixtures of the chart tests: the real helm binary, rendering, and the API schemas.

helm is the one the local control plane uses, built from Go modules into the cache by
`e2e.cluster.local.build` (`make helm-bin`, a step of `make unit`). The schemas come from
the Go module cache too: Kubernetes' OpenAPI v3 documents of each release the local control
plane supports (1.36 and 1.37), Kueue's and cert-manager's CRDs.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import yaml

from e2e.cluster.local import build
from tests.chart import openapi

CHART = pathlib.Path(__file__).resolve().parents[2] / "charts" / "fitgate"
RELEASE = "fitgate"
NAMESPACE = "fitgate-system"
# The cert-manager release whose CRDs the Kueue module's go.sum vouches for.
CERT_MANAGER_VERSION = "v1.21.0"

#: The setups the chart is tested in, by name: values given with --set-json.
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "self-managed": {"certificates": {"mode": "self-managed"}},
    "cert-manager": {"certificates": {"mode": "cert-manager"}},
    "cert-manager-cluster-issuer": {"certificates": {
        "mode": "cert-manager",
        "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer",
                                      "group": "cert-manager.io"}}}},
    "ha": {"replicaCount": 3, "networkPolicy": {"enabled": True, "webhookFrom": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}}]},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "priorityClassName": "system-cluster-critical"},
    "single": {"replicaCount": 1, "leaderElection": {"enabled": False}},
    "karpenter": {"karpenter": {"enabled": True}},
    # A private control plane's firewall allows 443 and 10250 (docs/platform-guide.md).
    "private-control-plane": {"webhook": {"port": 10250}},
    "external": {"externalWebhook": {"url": "https://127.0.0.1:9443",
                                     "caBundle": "Q0EK"}},
}


class HelmError(Exception):
    """helm exited non-zero; the message is its stderr."""


@dataclasses.dataclass(frozen=True)
class Helm:
    path: pathlib.Path

    def run(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run([str(self.path), *args], capture_output=True, text=True,
                              timeout=timeout, check=False)
        if proc.returncode != 0:
            raise HelmError(proc.stderr.strip() or proc.stdout.strip())
        return proc.stdout

    def template(self, values: Mapping[str, Any] | None = None,
                 extra: Sequence[str] = (), hooks: bool = False) -> list[dict[str, Any]]:
        """The rendered objects of the chart for these values: the release's own, and
        with `hooks` the hook objects too (the uninstall hook, test_release_hook.py)."""
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                *(() if hooks else ("--no-hooks",))]
        out = self.run(*args, *_set_json(values), *extra)
        return [d for d in yaml.safe_load_all(out) if d]

    def notes(self, values: Mapping[str, Any] | None = None) -> str:
        """NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
        out = self.run("install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                       "--dry-run=client", *_set_json(values))
        return out[out.index("NOTES:"):]

    def lint(self, values: Mapping[str, Any] | None = None) -> str:
        return self.run("lint", str(CHART), "--strict", "--namespace", NAMESPACE,
                        *_set_json(values))


def _set_json(values: Mapping[str, Any] | None) -> list[str]:
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


@pytest.fixture(scope="session")
def helm() -> Helm:
    component = build.by_name()["helm"]
    path = build.binary_path(component)
    if not path.exists():
        pytest.fail(f"helm {component.version} is not built ({path} is missing): run "
                    "`make helm-bin`, which builds it from Go modules as the local "
                    "control plane does (a step of `make unit`)")
    return Helm(path)



def by_kind(objects: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def config_of(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The configuration file the chart gives `fitgate serve`."""
    cm = one(objects, "ConfigMap")
    return yaml.safe_load(cm["data"]["config.yaml"])


def env_of(objects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fitgate container's environment, name -> value or valueFrom ({} without a
    Deployment)."""
    deployments = by_kind(objects, "Deployment")
    if not deployments:
        return {}
    (container,) = deployments[0]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def cert_mode(objects: Sequence[Mapping[str, Any]]) -> str:
    """How the rendered chart provides the webhook's certificate."""
    if not by_kind(objects, "Deployment"):
        return "external"
    if by_kind(objects, "Certificate"):
        return "cert-manager"
    return str(env_of(objects)["FITGATE_CERT_MODE"])


@pytest.fixture(scope="session", params=sorted(build.KUBE_RELEASES),
                ids=lambda minor: f"kubernetes-{minor}")
def schemas(request: pytest.FixtureRequest) -> openapi.Schemas:
    """The API schemas of each Kubernetes minor the local control plane supports."""
    s = openapi.Schemas()
    kube = build.module_source("k8s.io/kubernetes", build.KUBE_RELEASES[request.param],
                               via="kube-apiserver")
    s.load_openapi(kube / "api" / "openapi-spec" / "v3")
    kueue = build.module_source("sigs.k8s.io/kueue", build.KUEUE_VERSION, via="kueue")
    cert_manager = build.module_source("github.com/cert-manager/cert-manager",
                                       CERT_MANAGER_VERSION, via="kueue")
    crd_files = [kueue / "config/components/crd/bases/kueue.x-k8s.io_admissionchecks.yaml",
                 cert_manager / "deploy/crds/cert-manager.io_certificates.yaml",
                 cert_manager / "deploy/crds/cert-manager.io_issuers.yaml"]
    s.load_crds(yaml.safe_load(f.read_text()) for f in crd_files)
    crds_dir = CHART / "crds"
    if crds_dir.is_dir():
        s.load_crds(d for f in sorted(crds_dir.glob("*.yaml"))
                    for d in yaml.safe_load_all(f.read_text()) if d)
    return s
