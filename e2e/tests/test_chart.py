"""The Helm chart on a real API server.

1. Every object the chart renders, in each setup the unit tests render (default,
   self-managed, cert-manager, HA, external webhook), passes `kubectl apply
   --dry-run=server`: the API server's own validation, strict field checking, Kueue's
   AdmissionCheck CRD and cert-manager's CRDs (installed from the module cache for the
   test). The ServiceMonitor is left out: the Prometheus operator's CRD is not available
   here.
2. `helm install` with `externalWebhook.url` (no cert-manager; the usual local-development
   mode, as the e2e scenarios run `fitgate serve` as a local process) creates the CRDs the
   chart ships, the RBAC, the AdmissionCheck and the webhook configurations pointing at the
   URL.
3. A token of the chart's ServiceAccount (`kubectl create token`) can do exactly what
   `admission/kube/rbac.py` declares: every declared call is allowed, and calls next to
   them (other verbs, other resources, other names, other namespaces) are denied, as
   SelfSubjectAccessReviews answer them.
4. `fitgate serve` as a local process with that token and the chart's configuration file
   works behind the chart's webhook configurations (see the last test).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from admission.gate import predicates as gating
from admission.kube import kinds, rbac
from e2e import builders, harness, kube
from e2e.cluster.local import build, processes
from tests.admission import builders as ab

pytestmark = [pytest.mark.e2e]

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "fitgate"
CERT_MANAGER_VERSION = "v1.21.0"  # the release whose CRDs Kueue's go.sum vouches for
NAMESPACE = "fitgate-chart-e2e"
RELEASE = "fitgate"
CALL_TIMEOUT_S = 120
KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"

# The setups of tests/chart/conftest.py SCENARIOS that the API server can check here.
SETUPS: dict[str, dict[str, Any]] = {
    "default": {},
    "cert-manager": {"certificates": {"mode": "cert-manager"}},
    "ha": {"replicaCount": 3, "networkPolicy": {"enabled": True},
           "priorityClassName": "system-cluster-critical"},
    "external": {"externalWebhook": {"url": "https://127.0.0.1:9443", "caBundle": "Q0EK"}},
}


class Tools:
    """helm and kubectl against the e2e cluster, each call bounded in time."""

    def __init__(self, kubeconfig: pathlib.Path, helm: pathlib.Path, kubectl: pathlib.Path
                 ) -> None:
        self.kubeconfig = kubeconfig
        self.helm_path = helm
        self.kubectl_path = kubectl

    def _run(self, argv: list[str], input_text: str | None = None, check: bool = True
             ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(argv, input=input_text, capture_output=True, text=True,
                              timeout=CALL_TIMEOUT_S, check=False,
                              env={**os.environ, "KUBECONFIG": str(self.kubeconfig)})
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:4])} ... failed ({proc.returncode}): "
                                 f"{proc.stderr.strip()}")
        return proc

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.helm_path), *args], check=check)

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True,
                kubeconfig: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.kubectl_path), "--kubeconfig",
                          str(kubeconfig or self.kubeconfig), *args],
                         input_text=input_text, check=check)


def _wait_established(tools: Tools, crd: str, timeout: float = 60) -> None:
    """Until the CRD is Established (bounded); `kubectl wait` fails while a new CRD has no
    conditions yet."""
    deadline = time.monotonic() + timeout
    while True:
        status = tools.kubectl("get", "crd", crd, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Established')]"
                               ".status}", check=False).stdout.strip()
        if status == "True":
            return
        assert time.monotonic() < deadline, f"CRD {crd} not Established after {timeout}s"
        time.sleep(0.5)


def _values_args(values: dict[str, Any]) -> list[str]:
    return [a for k, v in values.items() for a in ("--set-json", f"{k}={json.dumps(v)}")]


@pytest.fixture(scope="module")
def tools(e2e_cluster: Any) -> Tools:
    local = e2e_cluster.local
    if local is not None:
        helm, kubectl = local.binaries["helm"], local.binaries["kubectl"]
    else:
        components = build.by_name()
        helm = build.binary_path(components["helm"])
        kubectl = build.binary_path(components["kubectl"])
    return Tools(e2e_cluster.kubeconfig, pathlib.Path(helm), pathlib.Path(kubectl))


@pytest.fixture(scope="module")
def cert_manager_crds(tools: Tools) -> Iterator[None]:
    src = build.module_source("github.com/cert-manager/cert-manager", CERT_MANAGER_VERSION,
                              via="kueue")
    files = [src / "deploy/crds/cert-manager.io_certificates.yaml",
             src / "deploy/crds/cert-manager.io_issuers.yaml"]
    for f in files:
        tools.kubectl("apply", "--server-side", "--field-manager=fitgate-e2e", "-f", str(f))
    for crd in ("certificates.cert-manager.io", "issuers.cert-manager.io"):
        _wait_established(tools, crd)
    yield
    for f in files:
        tools.kubectl("delete", "--ignore-not-found", "-f", str(f))


@pytest.fixture(scope="module")
def namespace(tools: Tools) -> Iterator[str]:
    tools.kubectl("create", "namespace", NAMESPACE)
    yield NAMESPACE
    tools.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("setup", list(SETUPS))
def test_every_rendered_object_passes_the_api_servers_validation(
        tools: Tools, cert_manager_crds: None, namespace: str, setup: str) -> None:
    out = tools.helm("template", RELEASE, str(CHART), "--namespace", namespace,
                     *_values_args(SETUPS[setup])).stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    assert objects
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    # Strict field validation: an unknown or duplicate field is an error, not a warning.
    proc = tools.kubectl("apply", "--dry-run=server", "--validate=strict", "-o", "name",
                         "-f", "-", input_text=text, check=False)
    assert proc.returncode == 0, proc.stderr
    accepted = proc.stdout.split()
    assert len(accepted) == len(objects), (accepted, [o["kind"] for o in objects])


@pytest.fixture(scope="module")
def installed(tools: Tools, namespace: str) -> Iterator[dict[str, Any]]:
    values = {"externalWebhook": {"url": "https://127.0.0.1:9443",
                                  "caBundle": "Q0EK"},
              "admissionCheck": {"create": True, "name": f"fitgate-e2e-{uuid.uuid4().hex[:6]}"}}
    tools.helm("install", RELEASE, str(CHART), "--namespace", namespace,
               "--timeout", "120s", *_values_args(values))
    manifest = tools.helm("get", "manifest", RELEASE, "--namespace", namespace).stdout
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    yield {"values": values, "objects": objects}
    tools.helm("uninstall", RELEASE, "--namespace", namespace, "--timeout", "120s")


def _live(tools: Tools, kind: str, name: str, namespace: str | None = None
          ) -> dict[str, Any]:
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    obj: dict[str, Any] = json.loads(tools.kubectl(*args).stdout)
    return obj


@pytest.mark.timeout(300)
def test_helm_install_creates_rbac_admission_check_webhooks_and_crds(
        tools: Tools, installed: dict[str, Any], namespace: str) -> None:
    objects = installed["objects"]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    assert "Deployment" not in by_kind  # the webhook runs outside the cluster
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                 "RoleBinding", "ConfigMap", "AdmissionCheck",
                 "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (obj,) = by_kind[kind]
        live = _live(tools, kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        assert live["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    check = _live(tools, "admissioncheck", installed["values"]["admissionCheck"]["name"])
    assert check["spec"]["controllerName"] == "fitgate.io/topology-fit"
    mutating = _live(tools, "mutatingwebhookconfiguration",
                     by_kind["MutatingWebhookConfiguration"][0]["metadata"]["name"])
    urls = {h["name"]: h["clientConfig"]["url"] for h in mutating["webhooks"]}
    assert urls == {"gate.jobs.fitgate.io": "https://127.0.0.1:9443/mutate-jobs",
                    "placement.pods.fitgate.io": "https://127.0.0.1:9443/mutate-pods"}
    policies = {h["name"]: h["failurePolicy"] for h in mutating["webhooks"]}
    assert policies == {"gate.jobs.fitgate.io": "Ignore", "placement.pods.fitgate.io": "Fail"}
    # Every CRD the chart ships (charts/fitgate/crds) is installed and served.
    shipped = [d for f in sorted((CHART / "crds").glob("*.yaml"))
               for d in yaml.safe_load_all(f.read_text()) if d]
    for crd in shipped:
        _wait_established(tools, crd["metadata"]["name"])


def _token_kubeconfig(tools: Tools, token: str, path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig with the cluster of the admin's and only the token as credential (for
    an external cluster; the local one has `token_for`)."""
    admin = yaml.safe_load(tools.kubeconfig.read_text())
    context = next(c for c in admin["contexts"]
                   if c["name"] == admin.get("current-context")) if admin.get(
        "current-context") else admin["contexts"][0]
    cluster = next(c for c in admin["clusters"]
                   if c["name"] == context["context"]["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "fitgate", "user": {"token": token}}],
        "contexts": [{"name": "fitgate", "context": {"cluster": cluster["name"],
                                                      "user": "fitgate"}}],
        "current-context": "fitgate"}))
    path.chmod(0o600)
    return path


#: (verb, kind, subresource, namespace, name): one SelfSubjectAccessReview.
Question = tuple[str, kinds.Kind, str, str | None, str | None]
CONCURRENT_REVIEWS = 4  # kubectl processes at once (the machines have 2 cores)


def _declared_questions(namespace: str, names: dict[str, str]) -> list[Question]:
    out = []
    for (kind, sub), verbs in rbac.PERMISSIONS.items():
        for verb in sorted(verbs):
            ns = namespace if kind in rbac.OWN_NAMESPACE else (
                "team-a" if kind.namespaced else None)
            key = rbac.NAMED.get(kind)
            name = names[key] if key and not sub and verb != "create" else None
            out.append((verb, kind, sub, ns, name))
    return out


async def _can_i(tools: Tools, kubeconfig: pathlib.Path, limit: asyncio.Semaphore,
                 question: Question) -> bool | str:
    """Ask the API server, as the token's user, with a SelfSubjectAccessReview naming the
    group and resource exactly (`kubectl auth can-i` resolves names through discovery,
    which misreads resources whose CRD is not installed). A failed review returns its
    error instead of raising, so that every review finishes before the test fails."""
    verb, kind, sub, namespace, name = question
    attributes = {"verb": verb, "group": kind.group, "version": kind.version,
                  "resource": kind.plural, "subresource": sub, "namespace": namespace or "",
                  "name": name or ""}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attributes}}
    # --validate=false: client-side validation would read the CRDs, which the
    # ServiceAccount may not (and need not) do; the API server validates the review.
    argv = [str(tools.kubectl_path), "--kubeconfig", str(kubeconfig), "create",
            "--validate=false", "-o", "json", "-f", "-"]
    async with limit:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(review).encode()),
                                          CALL_TIMEOUT_S)
    if proc.returncode != 0:
        return f"review failed: {err.decode().strip()}"
    return bool(json.loads(out)["status"].get("allowed"))


@pytest.mark.timeout(300)
async def test_the_service_accounts_token_can_do_exactly_what_rbac_py_declares(
        tools: Tools, installed: dict[str, Any], namespace: str, e2e_cluster: Any,
        tmp_path: pathlib.Path) -> None:
    objects = installed["objects"]
    sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    if e2e_cluster.local is not None:
        kubeconfig = e2e_cluster.local.token_for(sa, namespace, duration="10m").kubeconfig
    else:
        token = tools.kubectl("create", "token", sa, "-n", namespace,
                              "--duration=10m").stdout.strip()
        kubeconfig = _token_kubeconfig(tools, token, tmp_path / "fitgate.kubeconfig")
    whoami = json.loads(tools.kubectl("auth", "whoami", "-o", "json",
                                      kubeconfig=kubeconfig).stdout)
    assert whoami["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{namespace}:{sa}")

    config = yaml.safe_load(next(o for o in objects if o["kind"] == "ConfigMap")["data"][
        "config.yaml"])
    names = {"lease": config["lease_name"]}
    allowed = _declared_questions(namespace, names)
    denied: list[Question] = [
        # Verbs the code never uses on kinds it does use.
        ("delete", kinds.NODE, "", None, None),
        ("create", kinds.POD, "", "team-a", None),
        ("update", kinds.WORKLOAD, "", "team-a", None),
        ("update", kinds.WORKLOAD, "status", "team-a", None),
        ("delete", kinds.ADMISSION_CHECK, "", None, None),
        ("create", kinds.RESOURCE_SLICE, "", None, None),
        ("patch", kinds.NODE_SHAPE, "", None, None),
        ("delete", kinds.JOB, "", "team-a", None),
        # The Lease: only in fitgate's namespace, and only fitgate's own by name.
        ("get", kinds.LEASE, "", "team-a", None),
        ("update", kinds.LEASE, "", namespace, "someone-elses-lease"),
        ("delete", kinds.LEASE, "", namespace, config["lease_name"]),
        # Nothing of self-managed certificates without that mode, nothing else at all.
        ("get", kinds.SECRET, "", namespace, None),
        ("list", kinds.SECRET, "", None, None),
        ("patch", kinds.MUTATING_WEBHOOK_CONFIGURATION, "", None, None),
    ]
    assert not (set(denied) & set(allowed))
    limit = asyncio.Semaphore(CONCURRENT_REVIEWS)
    results = await asyncio.gather(
        *(_can_i(tools, kubeconfig, limit, q) for q in allowed + denied))
    failed = [(q, r) for q, r in zip(allowed + denied, results, strict=True)
              if isinstance(r, str)]
    assert failed == []
    got_allowed = dict(zip(allowed, results[:len(allowed)], strict=True))
    got_denied = dict(zip(denied, results[len(allowed):], strict=True))
    refused = [q for q, ok in got_allowed.items() if ok is not True]
    granted = [q for q, ok in got_denied.items() if ok is True]
    assert refused == [], "declared in rbac.py but refused to the chart's ServiceAccount"
    assert granted == [], "not declared in rbac.py but granted to the chart's ServiceAccount"
    assert len(allowed) >= 40


@pytest.mark.timeout(420)
async def test_fitgate_serve_runs_as_the_charts_service_account_behind_its_webhooks(
        tools: Tools, e2e: harness.Harness, tmp_path: pathlib.Path) -> None:
    """The local-development mode end to end: the chart installed with externalWebhook.url,
    `fitgate serve` run as a local process with a token of the chart's ServiceAccount and
    the chart's configuration file. With only the chart's RBAC it syncs its caches, takes
    the leader Lease the chart names, marks the chart's AdmissionCheck Active, and the
    chart's mutating webhook configuration brings it a Job to gate."""
    if e2e.cluster is None:
        pytest.skip("needs the local cluster (token_for, local processes)")
    release, ns = "fg-serve", f"fitgate-serve-{uuid.uuid4().hex[:6]}"
    _, _, pem = ab.tls_pair(tmp_path)
    port = processes.free_port()
    check = f"fitgate-{e2e.namespace}"
    values = {"externalWebhook": {"url": f"https://127.0.0.1:{port}",
                                  "caBundle": base64.b64encode(pem).decode()},
              "admissionCheck": {"name": check}}
    tools.helm("install", release, str(CHART), "--namespace", ns, "--create-namespace",
               "--timeout", "120s", *_values_args(values))
    try:
        objects = [d for d in yaml.safe_load_all(tools.helm(
            "get", "manifest", release, "--namespace", ns).stdout) if d]
        cm = next(o for o in objects if o["kind"] == "ConfigMap")
        config_file = tmp_path / "config.yaml"
        config_file.write_text(cm["data"]["config.yaml"])
        sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
        creds = e2e.cluster.token_for(sa, ns)
        health = processes.free_port()
        fitgate_bin = pathlib.Path(sys.executable).parent / "fitgate"
        await e2e.start_process("fitgate", [
            str(fitgate_bin), "serve", "--config", str(config_file),
            "--health-address", "127.0.0.1", "--health-port", str(health),
            "--webhook-port", str(port), "--cert-dir", str(tmp_path),
            "--identity", "fitgate-local-0", "--log-format", "console"],
            env={"KUBECONFIG": str(creds.kubeconfig)},
            ready_url=f"http://127.0.0.1:{health}/readyz", timeout=120)
        lease_name = yaml.safe_load(cm["data"]["config.yaml"])["lease_name"]

        async def leading() -> bool:
            lease = await e2e.kube.get("coordination.k8s.io/v1", "Lease", lease_name, ns)
            return bool((lease or {}).get("spec", {}).get("holderIdentity") == "fitgate-local-0")
        await e2e.wait_for(leading, 60, f"fitgate-local-0 holding Lease {ns}/{lease_name}")

        async def active() -> bool:
            got = await e2e.kube.get(KUEUE_V1BETA2, "AdmissionCheck", check)
            return kube.has_condition(got, "Active")
        await e2e.wait_for(active, 60, f"AdmissionCheck {check} Active")

        queue = await e2e.create_queues(f"cq-{e2e.namespace}", admission_checks=[check])

        async def gated() -> bool:
            probe = builders.job("probe", e2e.namespace, queue)
            got = await e2e.kube.request(
                "POST", f"/apis/batch/v1/namespaces/{e2e.namespace}/jobs", probe,
                query={"dryRun": "All"})
            return gating.gated_by_us(got)
        await e2e.wait_for(gated, 60, "a Job gated through the chart's webhook configuration")
    finally:
        # --no-hooks: the uninstall hook Job's pod would never finish on kwok's nodes.
        tools.helm("uninstall", release, "--namespace", ns, "--timeout", "120s",
                   "--no-hooks", check=False)
        tools.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false",
                      check=False)


@pytest.mark.timeout(420)
async def test_self_managed_certificates_with_only_the_charts_rbac(
        tools: Tools, e2e: harness.Harness, tmp_path: pathlib.Path) -> None:
    """certificates.mode=self-managed: `fitgate serve` with the chart's token, environment
    and configuration creates its Secret, writes the CA into both webhook configurations
    (which a `helm upgrade` keeps) and serves the webhook with a certificate that CA
    verifies for the Service's name."""
    if e2e.cluster is None:
        pytest.skip("needs the local cluster (token_for, local processes)")
    release, ns = "fg-certs", f"fitgate-certs-{uuid.uuid4().hex[:6]}"
    values = {"replicaCount": 1, "admissionCheck": {"create": False},
              "certificates": {"mode": "self-managed"}}
    tools.helm("install", release, str(CHART), "--namespace", ns, "--create-namespace",
               "--timeout", "120s", *_values_args(values))
    try:
        objects = [d for d in yaml.safe_load_all(tools.helm(
            "get", "manifest", release, "--namespace", ns).stdout) if d]
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        cm = next(o for o in objects if o["kind"] == "ConfigMap")
        config_file = tmp_path / "config.yaml"
        config_file.write_text(cm["data"]["config.yaml"])
        sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
        creds = e2e.cluster.token_for(sa, ns)
        cert_dir = tmp_path / "tls"
        cert_dir.mkdir()
        health, port = processes.free_port(), processes.free_port()
        fitgate_bin = pathlib.Path(sys.executable).parent / "fitgate"
        await e2e.start_process("fitgate", [
            str(fitgate_bin), "serve", "--config", str(config_file),
            "--health-address", "127.0.0.1", "--health-port", str(health),
            "--webhook-port", str(port), "--cert-dir", str(cert_dir),
            "--identity", "fitgate-local-0", "--log-format", "console"],
            env={"KUBECONFIG": str(creds.kubeconfig), **env},
            ready_url=f"http://127.0.0.1:{health}/readyz", timeout=120)

        # /readyz is 200 once the servers listen; the Secret and the caBundles may still
        # be in flight (the certificate manager writes them asynchronously).
        async def created() -> dict[str, Any] | None:
            return await e2e.kube.get("v1", "Secret", env["FITGATE_CERT_SECRET"], ns)
        secret = await e2e.wait_for(created, 60, "the Secret fitgate keeps its pair in")
        assert secret["type"] == "kubernetes.io/tls"
        ca = base64.b64decode(secret["data"]["ca.crt"])

        async def trusted() -> bool:
            for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                name = env[f"FITGATE_{'MUTATING' if kind[0] == 'M' else 'VALIDATING'}"
                           "_WEBHOOK_CONFIGURATION"]
                got = await e2e.kube.get("admissionregistration.k8s.io/v1", kind, name)
                if got is None or any(base64.b64decode(h["clientConfig"].get("caBundle", ""))
                                      != ca for h in got["webhooks"]):
                    return False
            return True
        await e2e.wait_for(trusted, 60, "the CA in both webhook configurations")
        # An upgrade of the release keeps the caBundle fitgate wrote (the chart renders
        # none in this mode, and helm leaves fields it does not manage alone).
        tools.helm("upgrade", release, str(CHART), "--namespace", ns, "--reuse-values",
                   "--set", "logLevel=debug", "--timeout", "120s")
        assert await trusted(), "helm upgrade dropped the caBundle fitgate wrote"

        context = ssl.create_default_context(cadata=ca.decode())
        service = f"{env['FITGATE_WEBHOOK_SERVICE']}.{ns}.svc"

        async def handshake() -> dict[str, Any] | None:
            # The webhook server starts right after the certificate keeper.
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                          server_hostname=service)
            except ConnectionRefusedError:
                return None
            peer: dict[str, Any] | None = writer.get_extra_info("peercert")
            writer.close()
            return peer
        peer = await e2e.wait_for(handshake, 30, "a TLS handshake the caBundle verifies")
        assert ("DNS", service) in peer["subjectAltName"]
    finally:
        # --no-hooks: the uninstall hook Job's pod would never finish on kwok's nodes.
        tools.helm("uninstall", release, "--namespace", ns, "--timeout", "120s",
                   "--no-hooks", check=False)
        tools.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false",
                      check=False)
