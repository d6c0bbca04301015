"""The chart, rendered by the real helm in each setup: it lints, every object is valid
against the API's schemas, and the pieces agree with each other (ports, names, the
certificate wiring of each mode, HA, security)."""

from __future__ import annotations

import base64
import json
import shutil

import pytest
import yaml

from tests.chart import openapi
from tests.chart.conftest import (
    CHART,
    NAMESPACE,
    SCENARIOS,
    Helm,
    HelmError,
    by_kind,
    cert_mode,
    config_of,
    env_of,
    one,
)

IDS = list(SCENARIOS)


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> dict[str, list[dict]]:
    return {name: helm.template(values) for name, values in SCENARIOS.items()}


@pytest.mark.parametrize("scenario", IDS)
def test_lint_strict(helm: Helm, scenario: str) -> None:
    out = helm.lint(SCENARIOS[scenario])
    assert "0 chart(s) failed" in out


@pytest.mark.parametrize("scenario", IDS)
def test_every_object_is_valid_against_the_api_schemas(
        rendered: dict[str, list[dict]], schemas: openapi.Schemas, scenario: str) -> None:
    checked = 0
    for obj in rendered[scenario]:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] == "ServiceMonitor":
            # The Prometheus operator's CRD is not in the module cache; see test below.
            continue
        assert schemas.knows(obj["apiVersion"], obj["kind"]), where
        assert schemas.validate(obj) == [], where
        checked += 1
    assert checked >= 8


def test_the_schema_check_catches_what_the_api_server_refuses(
        rendered: dict[str, list[dict]], schemas: openapi.Schemas) -> None:
    """The structural check is not vacuous: the faults a chart typo makes are found."""
    deployment = one(rendered["default"], "Deployment")
    broken = json.loads(json.dumps(deployment))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFS"] = True
    container["ports"][0]["containerPort"] = "9443"
    del broken["spec"]["selector"]
    errors = schemas.validate(broken)
    assert any("readOnlyRootFS: unknown field" in e for e in errors)
    assert any("containerPort: str" in e for e in errors)
    assert any(".spec.selector: required" in e for e in errors)
    check = one(rendered["default"], "AdmissionCheck")
    bad_check = {**check, "spec": {"controllerName": 7}}
    assert schemas.validate(bad_check)


def test_default_objects(rendered: dict[str, list[dict]]) -> None:
    kinds = sorted(o["kind"] for o in rendered["default"])
    assert kinds == sorted([
        "AdmissionCheck", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
        "MutatingWebhookConfiguration", "NetworkPolicy", "PodDisruptionBudget", "Role",
        "RoleBinding", "Service", "ServiceAccount", "ValidatingWebhookConfiguration",
        *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2])
    for obj in rendered["default"]:
        namespaced = obj["kind"] not in ("AdmissionCheck", "ClusterRole", "ClusterRoleBinding",
                                         "MutatingWebhookConfiguration",
                                         "ValidatingWebhookConfiguration",
                                         "ValidatingAdmissionPolicy",
                                         "ValidatingAdmissionPolicyBinding")
        assert (obj["metadata"].get("namespace") == NAMESPACE) == namespaced, obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "fitgate"


def test_admission_check_names_fitgates_controller(rendered: dict[str, list[dict]]) -> None:
    check = one(rendered["default"], "AdmissionCheck")
    assert check["spec"] == {"controllerName": "fitgate.io/topology-fit"}
    assert check["metadata"]["name"] == "fitgate"


def test_pod_security_and_probes(rendered: dict[str, list[dict]]) -> None:
    pod = one(rendered["default"], "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] == "http"
    assert container["livenessProbe"]["httpGet"]["port"] == "http"
    config = config_of(rendered["default"])
    assert ports == {"webhook": config["webhook_port"], "http": config["health_port"]}
    # With a read-only root filesystem, /tmp is the one writable place.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert container["resources"]["requests"]["cpu"]
    assert container["args"] == ["serve", "--config=/etc/fitgate/config.yaml"]


def test_service_targets_the_containers_named_ports(rendered: dict[str, list[dict]]) -> None:
    service = one(rendered["default"], "Service")
    container = one(rendered["default"], "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"webhook", "http"}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= names
    selector = service["spec"]["selector"]
    labels = one(rendered["default"], "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


def _hooks(objects: list[dict]) -> dict[str, dict]:
    out = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(objects, kind)["webhooks"]:
            out[hook["name"]] = hook
    return out


def test_webhooks_job_kinds_fail_open_and_placement_fails_closed(
        rendered: dict[str, list[dict]]) -> None:
    hooks = _hooks(rendered["default"])
    assert set(hooks) == {"gate.jobs.fitgate.io", "validate.jobs.fitgate.io",
                          "placement.pods.fitgate.io"}
    for name in ("gate.jobs.fitgate.io", "validate.jobs.fitgate.io"):
        assert hooks[name]["failurePolicy"] == "Ignore"
        groups = {(r["apiGroups"][0], r["resources"][0]) for r in hooks[name]["rules"]}
        assert ("batch", "jobs") in groups and ("jobset.x-k8s.io", "jobsets") in groups
        assert all(r["operations"] == ["CREATE"] for r in hooks[name]["rules"])
    placement = hooks["placement.pods.fitgate.io"]
    assert placement["failurePolicy"] == "Fail"
    assert placement["objectSelector"] == {"matchExpressions": [
        {"key": "fitgate.io/placement", "operator": "Exists"}]}
    assert placement["rules"][0]["resources"] == ["pods"]
    excluded = placement["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert {NAMESPACE, "kube-system", "kueue-system"} <= set(excluded["values"])
    service = one(rendered["default"], "Service")
    for hook in hooks.values():
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == (service["metadata"]["name"], NAMESPACE)
        assert ref["port"] in [p["port"] for p in service["spec"]["ports"]]
        assert hook["sideEffects"] == "None"


def test_self_managed_mode_tells_fitgate_what_to_manage(
        rendered: dict[str, list[dict]]) -> None:
    objects = rendered["self-managed"]
    assert cert_mode(objects) == "self-managed" == cert_mode(rendered["default"])
    assert not by_kind(objects, "Certificate") and not by_kind(objects, "Issuer")
    config = config_of(objects)
    env = env_of(objects)
    service = one(objects, "Service")["metadata"]["name"]
    assert env["FITGATE_WEBHOOK_SERVICE"] == service
    assert env["FITGATE_MUTATING_WEBHOOK_CONFIGURATION"] == one(
        objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert env["FITGATE_VALIDATING_WEBHOOK_CONFIGURATION"] == one(
        objects, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert env["FITGATE_CERT_SECRET"] and int(env["FITGATE_CERT_VALIDITY_DAYS"]) > int(
        env["FITGATE_CERT_RENEW_BEFORE_DAYS"])
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert "emptyDir" in tls  # fitgate writes the pair itself
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls")
    assert mount["mountPath"] == config["cert_dir"] and mount["readOnly"] is False
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        # fitgate writes the caBundle itself: no cert-manager annotation, no caBundle
        obj = one(objects, kind)
        assert "annotations" not in obj["metadata"]
        assert all("caBundle" not in h["clientConfig"] for h in obj["webhooks"])
    assert config["namespace"] == NAMESPACE


@pytest.mark.parametrize("scenario", ["cert-manager", "cert-manager-cluster-issuer"])
def test_cert_manager_mode_injects_the_certificates_ca(
        rendered: dict[str, list[dict]], scenario: str) -> None:
    objects = rendered[scenario]
    cert = one(objects, "Certificate")
    config = config_of(objects)
    assert cert_mode(objects) == "cert-manager"
    assert not any(k.startswith("FITGATE_CERT") for k in env_of(objects))
    service = one(objects, "Service")["metadata"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        ann = one(objects, kind)["metadata"]["annotations"]
        assert ann == {"cert-manager.io/inject-ca-from":
                       f"{NAMESPACE}/{cert['metadata']['name']}"}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls["secret"] == {"secretName": cert["spec"]["secretName"]}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls")
    assert mount["mountPath"] == config["cert_dir"] and mount["readOnly"] is True
    issuers = by_kind(objects, "Issuer")
    if scenario == "cert-manager":
        assert issuers[0]["spec"] == {"selfSigned": {}}
        assert cert["spec"]["issuerRef"]["name"] == issuers[0]["metadata"]["name"]
    else:
        assert not issuers
        assert cert["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer",
                                             "group": "cert-manager.io"}


def test_external_webhook_mode_points_at_the_url_and_runs_nothing_in_cluster(
        rendered: dict[str, list[dict]]) -> None:
    objects = rendered["external"]
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"Deployment", "Service", "PodDisruptionBudget", "Certificate"}
    assert {"ServiceAccount", "ClusterRole", "Role", "AdmissionCheck", "ConfigMap"} <= kinds
    hooks = _hooks(objects)
    assert hooks["gate.jobs.fitgate.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-jobs", "caBundle": "Q0EK"}
    assert hooks["placement.pods.fitgate.io"]["clientConfig"]["url"].endswith("/mutate-pods")
    assert hooks["validate.jobs.fitgate.io"]["clientConfig"]["url"].endswith("/validate-jobs")
    assert "cert_dir" not in config_of(objects)
    assert base64.b64decode(hooks["gate.jobs.fitgate.io"]["clientConfig"]["caBundle"])


def test_ha_spreads_replicas_keeps_one_available_and_elects_a_leader(
        rendered: dict[str, list[dict]]) -> None:
    objects = rendered["ha"]
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "kubernetes.io/hostname"
    assert spread[0]["labelSelector"]["matchLabels"].items() <= deployment["spec"][
        "selector"]["matchLabels"].items()
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    config = config_of(objects)
    assert config["leader_election"] is True and config["lease_name"]
    assert config["retry_period"] < config["renew_deadline"] < config["lease_duration"]
    identity = env_of(objects)["FITGATE_IDENTITY"]  # each replica's name in the Lease
    assert identity == {"fieldRef": {"fieldPath": "metadata.name"}}
    policy = one(objects, "NetworkPolicy")
    assert [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == ["webhook", "http"]
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}]
    monitor = one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(
        objects, "Service")["metadata"]["labels"].items()


def test_single_replica_has_no_pdb_that_would_block_drains(
        rendered: dict[str, list[dict]]) -> None:
    assert not by_kind(rendered["single"], "PodDisruptionBudget")
    assert config_of(rendered["single"])["leader_election"] is False


def test_a_changed_configuration_rolls_the_pods(helm: Helm) -> None:
    def checksum(values: dict) -> str:
        d = one(helm.template(values), "Deployment")
        return d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert checksum({}) != checksum({"logLevel": "debug"})


@pytest.mark.parametrize("args, complaint", [
    (["--set", "replicaCont=2"], "replicaCont"),
    (["--set", "webhook.timeoutSecond=3"], "timeoutSecond"),
    (["--set", "replicaCount=two"], "replicaCount"),
    (["--set", "certificates.mode=vault"], "certificates"),
    (["--set", "webhook.timeoutSeconds=60"], "timeoutSeconds"),
    (["--set", "externalWebhook.url=http://127.0.0.1:9443"], "url"),
    (["--set-json", 'tolerations=[{"key":"a","opertor":"Exists"}]'], "opertor"),
], ids=["typo-top", "typo-nested", "wrong-type", "bad-enum", "out-of-range", "plain-http",
        "typo-in-list-item"])
def test_the_values_schema_refuses_typos_and_wrong_types(helm: Helm, args: list[str],
                                                         complaint: str) -> None:
    with pytest.raises(HelmError) as err:
        helm.template(extra=args)
    assert "schema" in str(err.value).lower() and complaint in str(err.value)


def _keys(node: object, prefix: str = "") -> set[str]:
    if not isinstance(node, dict):
        return set()
    out = set()
    for k, v in node.items():
        out.add(prefix + k)
        out |= _keys(v, f"{prefix}{k}.")
    return out


def _schema_keys(schema: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in (schema.get("properties") or {}).items():
        out.add(prefix + k)
        if v.get("type") == "object" and "properties" in v and k not in (
                "issuerRef", "affinity", "podSecurityContext", "securityContext", "resources"):
            out |= _schema_keys(v, f"{prefix}{k}.")
    return out


def test_values_and_schema_list_the_same_keys_and_every_object_is_closed() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    value_keys = {k for k in _keys(values)
                  if not k.startswith(("resources.", "podSecurityContext.",
                                       "securityContext."))}
    # `global` is Helm's own key (values shared across an umbrella release), not ours.
    assert value_keys == _schema_keys(schema) - {"global"}

    def closed(node: object, path: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, path
            for k, v in node.items():
                closed(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                closed(v, f"{path}[{i}]")
    closed(schema, "")


def test_every_value_is_documented() -> None:
    """Each setting in values.yaml has its own comment right above it. Groups (a key whose
    value is a mapping of settings) and the contents of Kubernetes-typed defaults
    (resources, security contexts, list items) are described by their parent."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    opaque_indent: int | None = None  # inside a block documented as a whole
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if opaque_indent is not None:
            if indent > opaque_indent:
                continue
            opaque_indent = None
        if stripped.startswith("-"):
            opaque_indent = indent - 1
            continue
        key, _, rest = stripped.partition(":")
        if rest.strip() == "" and key not in ("resources", "podSecurityContext",
                                               "securityContext", "jobKinds",
                                               "excludeNamespaces"):
            continue  # a group: its settings carry the comments
        if rest.strip() == "":
            opaque_indent = indent
        if not lines[i - 1].strip().startswith("#"):
            undocumented.append(f"values.yaml:{i + 1}: {key}")
    assert undocumented == []


@pytest.mark.parametrize("path", sorted((CHART.parents[1] / "examples" / "values").glob(
    "*.yaml")), ids=lambda p: p.stem)
def test_example_values_render_valid_objects(helm: Helm, schemas: openapi.Schemas,
                                             path) -> None:
    objects = helm.template(extra=["-f", str(path)])
    assert objects
    for obj in objects:
        if obj["kind"] != "ServiceMonitor":
            assert schemas.validate(obj) == [], f"{path.name}: {obj['kind']}"


def test_notes_give_the_next_steps(helm: Helm) -> None:
    notes = helm.notes()
    assert "kubectl apply -f my-nodeshapes.yaml" in notes
    assert "admissionChecksStrategy:" in notes and "- name: fitgate" in notes
    assert "kubectl fitgate explain job/<name> -n <namespace>" in notes
    local = helm.notes(SCENARIOS["external"])
    assert "https://127.0.0.1:9443" in local
    assert f"kubectl -n {NAMESPACE} create token fitgate" in local
    custom = helm.notes({"admissionCheck": {"create": False}})
    assert "spec.controllerName: fitgate.io/topology-fit yourself" in custom


def test_renders_as_a_dependency_of_an_umbrella_chart(helm: Helm, tmp_path) -> None:
    """Helm passes `global` to every subchart; a schema that refused it would make any
    umbrella chart that depends on fitgate fail to render."""
    umbrella = tmp_path / "platform"
    (umbrella / "charts").mkdir(parents=True)
    shutil.copytree(CHART, umbrella / "charts" / "fitgate")
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "platform", "version": "1.0.0",
        "dependencies": [{"name": "fitgate", "version": _chart_version()}]}))
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {"imageRegistry": "registry.example.com", "labels": {"team": "ml"}},
        "fitgate": {"replicaCount": 3}}))
    out = helm.run("template", "platform", str(umbrella), "--namespace", NAMESPACE)
    objects = [d for d in yaml.safe_load_all(out) if d]
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert one(objects, "Service")["metadata"]["namespace"] == NAMESPACE
    # The subchart's own schema still applies inside the umbrella.
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {}, "fitgate": {"replicaCount": "three"}}))
    with pytest.raises(HelmError) as err:
        helm.run("template", "platform", str(umbrella), "--namespace", NAMESPACE)
    assert "replicaCount" in str(err.value)


def _chart_version() -> str:
    return str(yaml.safe_load((CHART / "Chart.yaml").read_text())["version"])
