"""fitgate on the e2e cluster as a user would run it in local development mode.

The Helm chart (``charts/fitgate``) installs the CRDs, the ServiceAccount, its RBAC, the
AdmissionCheck and the webhook configurations; with ``externalWebhook.url`` set it runs no
Deployment, and the webhook configurations call that URL. ``fitgate serve`` then runs on
this machine as a local process, authenticated with a token of the chart's
ServiceAccount, so every API call it makes goes through the chart's RBAC, and serves the
webhook on 127.0.0.1 with a certificate of a CA made for it (the chart's
``externalWebhook.caBundle``).

``Fitgate.install()`` does all of that; ``stop()``/``start()`` end and restart the serve
process (the fault tests kill it); ``uninstall()`` removes the release.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import yaml

from e2e import kube
from e2e.cluster.local import pki, processes

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "fitgate"
NAMESPACE = "fitgate-system"
RELEASE = "fitgate"
CHECK_NAME = "fitgate"  # the chart's admissionCheck.name
CONTROLLER_NAME = "fitgate.io/topology-fit"
HELM_TIMEOUT_S = 180
START_TIMEOUT_S = 90.0
TOKEN_SECONDS = 6 * 3600


def _log(msg: str) -> None:
    print(f"[fitgate-e2e] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Fitgate:
    """fitgate installed with the chart, ``fitgate serve`` as local processes."""

    kubeconfig: pathlib.Path       # an admin kubeconfig of the cluster
    helm: pathlib.Path             # the helm binary
    workdir: pathlib.Path          # certificates, the token kubeconfig, logs
    namespace: str = NAMESPACE
    replicas: list[processes.Process] = dataclasses.field(default_factory=list)
    webhook_port: int = dataclasses.field(default_factory=processes.free_port)
    health_ports: list[int] = dataclasses.field(default_factory=list)
    installed: bool = False

    # -- the chart -------------------------------------------------------------------------

    def helm_run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.helm), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, timeout=HELM_TIMEOUT_S,
                              check=False, env={**os.environ, "HELM_CACHE_HOME":
                                                str(self.workdir / "helm-cache"),
                                                "HELM_CONFIG_HOME":
                                                str(self.workdir / "helm-config"),
                                                "HELM_DATA_HOME":
                                                str(self.workdir / "helm-data")})
        if check and proc.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed ({proc.returncode}):\n"
                               f"{proc.stdout}\n{proc.stderr}")
        return proc

    def webhook_cert(self) -> tuple[pathlib.Path, str]:
        """The webhook's certificate directory (tls.crt, tls.key) and the CA bundle."""
        ca = pki.Authority(self.workdir / "pki")
        pair = ca.issue("fitgate-webhook", "/CN=fitgate-webhook", ips=("127.0.0.1",),
                        dns=("localhost",))
        cert_dir = self.workdir / "webhook-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(pair.cert.read_bytes())
        (cert_dir / "tls.key").write_bytes(pair.key.read_bytes())
        return cert_dir, ca.ca_bundle_b64()

    async def install(self, client: kube.Kube, replicas: int = 1) -> None:
        """helm install (local development mode), then start ``replicas`` serve processes
        and wait until the AdmissionCheck is Active."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        _, ca_bundle = self.webhook_cert()
        started = time.monotonic()
        self.helm_run("upgrade", "--install", RELEASE, str(CHART), "--namespace",
                      self.namespace, "--create-namespace",
                      "--set", f"externalWebhook.url=https://127.0.0.1:{self.webhook_port}",
                      "--set", f"externalWebhook.caBundle={ca_bundle}",
                      "--set", f"replicaCount={replicas}",
                      "--set", "logLevel=debug", "--wait", "--timeout", "120s")
        self.installed = True
        _log(f"helm install {RELEASE} ({CHART.relative_to(REPO)}, local development mode) "
             f"in {time.monotonic() - started:.1f}s")
        await self.write_token_kubeconfig(client)
        await self.write_chart_config(client)
        for i in range(replicas):
            self.start(i)
        await self.wait_ready(client)

    async def uninstall(self, client: kube.Kube) -> None:
        self.stop()
        if self.installed:
            self.helm_run("uninstall", RELEASE, "--namespace", self.namespace,
                          "--wait", "--timeout", "60s", check=False)
            self.installed = False

    # -- the ServiceAccount's identity -----------------------------------------------------

    async def service_account(self, client: kube.Kube) -> str:
        accounts = await client.list("v1", "ServiceAccount", self.namespace,
                                     label_selector=f"app.kubernetes.io/instance={RELEASE}")
        if len(accounts) != 1:
            raise RuntimeError(f"expected the chart's one ServiceAccount in {self.namespace}, "
                               f"found {[a['metadata']['name'] for a in accounts]}")
        return str(accounts[0]["metadata"]["name"])

    async def write_token_kubeconfig(self, client: kube.Kube) -> pathlib.Path:
        """A kubeconfig for the chart's ServiceAccount (a TokenRequest token)."""
        account = await self.service_account(client)
        token = await client.request(
            "POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": TOKEN_SECONDS}})
        admin = yaml.safe_load(self.kubeconfig.read_text())
        cluster = admin["clusters"][0]["cluster"]
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": cluster}],
            "users": [{"name": account, "user": {"token": token["status"]["token"]}}],
            "contexts": [{"name": "fitgate", "context": {"cluster": "e2e", "user": account}}],
            "current-context": "fitgate"}
        path = self.workdir / "fitgate.kubeconfig"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    async def write_chart_config(self, client: kube.Kube) -> pathlib.Path:
        """The chart's ``config.yaml`` (its ConfigMap), which a local ``fitgate serve``
        reads as NOTES.txt says; flags override the ports and paths per replica."""
        maps = await client.list("v1", "ConfigMap", self.namespace,
                                 label_selector=f"app.kubernetes.io/instance={RELEASE}")
        texts = [m["data"]["config.yaml"] for m in maps if "config.yaml" in (m.get("data") or {})]
        if len(texts) != 1:
            raise RuntimeError(f"expected one chart ConfigMap with config.yaml in "
                               f"{self.namespace}, found {len(texts)}")
        path = self.workdir / "fitgate.yaml"
        path.write_text(texts[0])
        return path

    # -- the serve processes -----------------------------------------------------------

    def start(self, index: int = 0) -> processes.Process:
        """Start (or restart) replica ``index`` of ``fitgate serve``."""
        cert_dir = self.workdir / "webhook-certs"
        while len(self.health_ports) <= index:
            self.health_ports.append(processes.free_port())
        # Replica 0 serves the webhook URL the chart points at; others on a port of
        # their own (the API server calls only one URL).
        webhook_port = self.webhook_port if index == 0 else processes.free_port()
        argv = [str(pathlib.Path(sys.executable).parent / "fitgate"), "serve",
                f"--config={self.workdir / 'fitgate.yaml'}",
                f"--kubeconfig={self.workdir / 'fitgate.kubeconfig'}",
                f"--identity=e2e-{index}",
                "--health-address=127.0.0.1", f"--health-port={self.health_ports[index]}",
                f"--webhook-port={webhook_port}", f"--cert-dir={cert_dir}",
                "--provisioning-wait=120", "--log-level=debug"]
        proc = processes.Process(f"fitgate-serve-{index}", argv, self.workdir,
                                 env={"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"})
        while len(self.replicas) <= index:
            self.replicas.append(proc)
        self.replicas[index] = proc
        return proc

    def kill(self, index: int = 0) -> None:
        """SIGKILL replica ``index`` (a crash: no Lease release, no cleanup)."""
        proc = self.replicas[index]
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, 9)
            proc.popen.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.replicas:
            proc.stop()

    def ready(self, index: int = 0) -> bool:
        return processes.probe(f"http://127.0.0.1:{self.health_ports[index]}/readyz")

    def readyz(self, index: int = 0) -> dict[str, Any]:
        import urllib.request
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_ports[index]}/readyz", timeout=3) as r:
                return dict(json.loads(r.read()))
        except (OSError, ValueError) as err:  # only for a diagnostic message
            return {"error": str(err)}

    async def wait_ready(self, client: kube.Kube, timeout: float = START_TIMEOUT_S) -> None:
        """Every replica ready (informers synced) and the AdmissionCheck Active."""
        async def ready() -> bool:
            for i, proc in enumerate(self.replicas):
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n"
                                       f"{proc.log_tail(40)}")
                if not self.ready(i):
                    return False
            check = await client.get("kueue.x-k8s.io/v1beta2", "AdmissionCheck", CHECK_NAME)
            return kube.has_condition(check, "Active")
        try:
            await kube.wait_for(ready, timeout, "fitgate serve ready and its AdmissionCheck "
                                "Active")
        except TimeoutError as err:
            tails = "\n".join(f"--- {p.name} ({self.readyz(i)}):\n{p.log_tail(40)}"
                              for i, p in enumerate(self.replicas))
            raise TimeoutError(f"{err}\n{tails}") from err

    def logs(self, lines: int = 80) -> str:
        return "\n".join(f"--- {p.name} ({p.log_path}):\n{p.log_tail(lines)}"
                         for p in self.replicas)
