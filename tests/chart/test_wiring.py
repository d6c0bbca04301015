"""The chart and the code agree: the configuration file the chart writes is one `fitgate
serve` loads, the certificate settings it passes are the ones `admission/certs/keeper.py` reads,
the job kinds it gates are the ones the code handles, and the fitgate objects shipped as
examples are valid against the CRDs the chart installs."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
import yaml

import fitcore
from admission import config
from admission.certs import keeper as certs
from admission.kube import kinds
from tests.chart import openapi
from tests.chart.conftest import (
    CHART,
    NAMESPACE,
    SCENARIOS,
    Helm,
    HelmError,
    config_of,
    env_of,
    one,
)

REPO = CHART.parents[1]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_serve_loads_the_charts_configuration(helm: Helm, tmp_path: pathlib.Path,
                                               scenario: str) -> None:
    objects = helm.template(SCENARIOS[scenario])
    path = tmp_path / "config.yaml"
    path.write_text(one(objects, "ConfigMap")["data"]["config.yaml"])
    env = {k: v for k, v in env_of(objects).items() if isinstance(v, str)}
    env["FITGATE_IDENTITY"] = "fitgate-7d9f-abcde"  # the pod name, from the downward API
    cfg = config.load(str(path), env=env)
    assert cfg.namespace == NAMESPACE
    assert cfg.identity == "fitgate-7d9f-abcde"
    assert cfg.lease_name == config_of(objects)["lease_name"]
    # The webhook's connection bounds come from the chart's values.
    assert (cfg.webhook_max_connections, cfg.webhook_header_timeout,
            cfg.webhook_body_timeout, cfg.webhook_decision_budget) == (256, 10.0, 10.0, 0.01)
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    if deployments:
        (container,) = deployments[0]["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert (cfg.webhook_port, cfg.health_port) == (ports["webhook"], ports["http"])
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert cfg.cert_dir == mounts["tls"]
        settings = certs.from_env(env, cfg.namespace, cfg.cert_dir)
        if settings is not None:  # self-managed
            service = one(objects, "Service")["metadata"]["name"]
            assert settings.dns_names[0] == f"{service}.{NAMESPACE}.svc"
            assert settings.mutating_webhook == one(
                objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    else:
        assert cfg.cert_dir is None  # a local fitgate serve is given its own


@pytest.mark.parametrize("values, seconds", [
    ({}, 1800.0), ({"provisioning": {"timeoutSeconds": 45}}, 45.0),
    ({"provisioning": {"timeoutSeconds": 0}}, 0.0)], ids=["default", "short", "none"])
def test_the_request_deadline_reaches_serve(helm: Helm, tmp_path: pathlib.Path,
                                            values: dict[str, object], seconds: float) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(one(helm.template(values), "ConfigMap")["data"]["config.yaml"])
    cfg = config.load(str(path), env={})
    assert cfg.provisioning_timeout == seconds
    assert config.Config(namespace="x").provisioning_timeout == 1800.0  # chart = code default


@pytest.mark.parametrize("values, version", [
    ({}, "auto"), ({"kubeVersion": "1.36"}, "1.36"), ({"kubeVersion": "1.37"}, "1.37")],
    ids=["default-auto", "1.36", "1.37"])
def test_the_kube_version_override_reaches_serve(helm: Helm, tmp_path: pathlib.Path,
                                                 values: dict[str, object], version: str
                                                 ) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(one(helm.template(values), "ConfigMap")["data"]["config.yaml"])
    assert config.load(str(path), env={}).kube_version == version
    assert config.Config(namespace="x").kube_version == "auto"  # chart = code default


def test_the_charts_kube_versions_are_the_ones_fitgate_follows(helm: Helm) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["kubeVersion"]["enum"] == ["", *fitcore.KUBE_VERSIONS]
    with pytest.raises(HelmError, match="kubeVersion"):
        helm.template({"kubeVersion": "1.35"})
    # The chart installs on the oldest minor fitgate follows, not on the one before.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    oldest = min(fitcore.KUBE_VERSIONS, key=lambda v: tuple(map(int, v.split("."))))
    assert chart["kubeVersion"] == f">={oldest}.0-0"
    helm.template(extra=("--kube-version", f"v{oldest}.0"))
    major, minor = map(int, oldest.split("."))
    with pytest.raises(HelmError, match=r"kubeVersion|incompatible"):
        helm.template(extra=("--kube-version", f"v{major}.{minor - 1}.0"))


def test_the_default_job_kinds_are_the_kinds_the_code_gates() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = {(k["apiGroup"], k["apiVersion"], k["resource"])
             for k in values["webhook"]["jobKinds"]}
    assert chart == {(k.group, k.version, k.plural) for k in kinds.JOB_KINDS}


def _fitgate_objects() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(REPO.glob("examples/**/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and str(doc.get("apiVersion", "")).startswith("fitgate.io/"):
                found.append((f"{path.relative_to(REPO)}:{doc['metadata']['name']}", doc))
    for page in sorted(REPO.glob("docs/*.md")):
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S):
            for doc in yaml.safe_load_all(block):
                if (isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(
                        "fitgate.io/") and "..." not in block):
                    found.append((f"{page.relative_to(REPO)}:{doc['metadata']['name']}", doc))
    return found


def test_shipped_fitgate_objects_are_valid_against_the_charts_crds(
        schemas: openapi.Schemas) -> None:
    objects = _fitgate_objects()
    assert {o["kind"] for _, o in objects} >= {"NodeShape", "FitPolicy"}
    problems = {where: schemas.validate(o) for where, o in objects}
    assert {k: v for k, v in problems.items() if v} == {}


def test_a_private_control_planes_webhook_port_is_one_value(helm: Helm) -> None:
    """Private GKE (docs/platform-guide.md, "Managed clusters"): `webhook.port` set to a port
    the control plane's firewall rule allows moves the container's port and the serve
    configuration, and the Service and the NetworkPolicy follow it by name."""
    objects = helm.template(SCENARIOS["private-control-plane"])
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["webhook"] == 10250
    assert config_of(objects)["webhook_port"] == 10250
    service = one(objects, "Service")
    webhook = [p for p in service["spec"]["ports"] if p["targetPort"] == "webhook"]
    assert [p["port"] for p in webhook] == [443]
    policy = one(objects, "NetworkPolicy")
    assert "webhook" in [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
