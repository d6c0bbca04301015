"""fitgate on the e2e cluster as a user runs it in local development mode.

The Helm chart (``charts/fitgate``) installs the CRDs, the ServiceAccount, its RBAC, the
AdmissionCheck and the webhook configurations; with ``externalWebhook.url`` set it runs no
Deployment and the webhook configurations call that URL. ``fitgate serve`` then runs on
this machine, as the chart's NOTES.txt says: with the chart's configuration (its
ConfigMap's ``config.yaml``) and a token of the chart's ServiceAccount
(``LocalCluster.token_for``), so every API call goes through the chart's RBAC. It serves
the webhook on 127.0.0.1 with a certificate of a CA made for it (the chart's
``externalWebhook.caBundle``).

``Fitgate.install()`` does all of that; replicas are the test's processes
(``Harness.start_process``: stopped at the end of the test, logs in its failure report);
``uninstall()`` removes the release.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys
import time
from typing import Any

import yaml

from e2e import builders, harness, kube, runner
from e2e.cluster.local import cluster, pki, processes

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "fitgate"
NAMESPACE = "fitgate-system"
RELEASE = "fitgate"
CHECK_NAME = "fitgate"  # the chart's admissionCheck.name
HELM_TIMEOUT_S = 180
READY_TIMEOUT_S = 90.0


def _log(msg: str) -> None:
    print(f"[fitgate-e2e] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Fitgate:
    """fitgate installed with the chart; ``fitgate serve`` replicas as local processes."""

    e2e: harness.Harness
    local: cluster.LocalCluster
    namespace: str = NAMESPACE
    replicas: list[runner.LocalProcess] = dataclasses.field(default_factory=list)
    webhook_port: int = dataclasses.field(default_factory=processes.free_port)
    installed: bool = False
    chart_values: tuple[str, ...] = ()  # more `--set` values, e.g. "karpenter.enabled=true"
    health_ports: dict[int, int] = dataclasses.field(default_factory=dict)  # replica -> port

    @property
    def workdir(self) -> pathlib.Path:
        return self.e2e.run_dir / "fitgate"

    # -- the chart -------------------------------------------------------------------------

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        home = self.workdir / "helm"
        proc = subprocess.run(
            [str(self.local.binaries["helm"]), "--kubeconfig", str(self.local.kubeconfig),
             *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": str(home),
                 "HELM_CACHE_HOME": str(home / "cache"),
                 "HELM_CONFIG_HOME": str(home / "config"),
                 "HELM_DATA_HOME": str(home / "data")})
        if check and proc.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args[:2])} failed ({proc.returncode}):\n"
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

    async def install(self, replicas: int = 1, order: tuple[int, ...] | None = None,
                      chart: pathlib.Path = CHART) -> None:
        """helm install (of ``chart``, default the repository's) in local development
        mode, then ``replicas`` serve processes started in ``order`` (default 0, 1, ...);
        the first one started leads (each waits until the AdmissionCheck is Active before
        the next starts)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        _, ca_bundle = self.webhook_cert()
        started = time.monotonic()
        self.helm("upgrade", "--install", RELEASE, str(chart), "--namespace",
                  self.namespace, "--create-namespace",
                  "--set", f"externalWebhook.url=https://127.0.0.1:{self.webhook_port}",
                  "--set", f"externalWebhook.caBundle={ca_bundle}",
                  "--set", f"replicaCount={replicas}", "--set", "logLevel=debug",
                  *(a for v in self.chart_values for a in ("--set", v)),
                  "--wait", "--timeout", "120s")
        self.installed = True
        _log(f"helm install {RELEASE} (local development mode) in "
             f"{time.monotonic() - started:.1f}s")
        await self.write_chart_config()
        for i in order or range(replicas):
            await self.start(i)
            await self.wait_active()

    async def uninstall(self) -> None:
        """The Jobs queued through the chart's check and their ClusterQueues, then the
        replicas and the release. The order is Kueue's finalizers': the AdmissionCheck
        stays (kueue.x-k8s.io/resource-in-use) while a ClusterQueue names it, and the
        ClusterQueue while Workloads hold its quota; otherwise ``helm uninstall --wait``
        waits out its 60 s and the next install can race the AdmissionCheck's deletion."""
        try:
            await self.release_queues()
        finally:
            for proc in self.replicas:
                await proc.stop()
        if self.installed:
            self.helm("uninstall", RELEASE, "--namespace", self.namespace, "--wait",
                      "--timeout", "60s", check=False)
            self.installed = False

    async def release_queues(self, timeout: float = 60) -> None:
        client = self.e2e.kube
        names = {str(cq["metadata"]["name"])
                 for cq in await client.list(builders.KUEUE, "ClusterQueue")
                 if CHECK_NAME in _checks_of(cq)}
        if not names:
            return
        for lq in await client.list(builders.KUEUE, "LocalQueue"):
            if (lq.get("spec") or {}).get("clusterQueue") not in names:
                continue
            namespace = str(lq["metadata"]["namespace"])
            for job in await client.list("batch/v1", "Job", namespace):
                await client.delete("batch/v1", "Job", job["metadata"]["name"], namespace)
        for name in names:
            await client.delete(builders.KUEUE, "ClusterQueue", name)

        async def released() -> bool:
            return not any(CHECK_NAME in _checks_of(cq)
                           for cq in await client.list(builders.KUEUE, "ClusterQueue"))
        await self.e2e.wait_for(released, timeout,
                                f"ClusterQueues {sorted(names)} using {CHECK_NAME} deleted")

    async def service_account(self) -> str:
        accounts = await self.e2e.kube.list(
            "v1", "ServiceAccount", self.namespace,
            label_selector=f"app.kubernetes.io/instance={RELEASE}")
        if len(accounts) != 1:
            raise RuntimeError(f"expected the chart's one ServiceAccount in {self.namespace}, "
                               f"found {[a['metadata']['name'] for a in accounts]}")
        return str(accounts[0]["metadata"]["name"])

    async def write_chart_config(self) -> pathlib.Path:
        """The chart's ``config.yaml`` (its ConfigMap), which a local ``fitgate serve``
        reads as NOTES.txt says; flags override ports and paths per replica."""
        maps = await self.e2e.kube.list("v1", "ConfigMap", self.namespace,
                                        label_selector=f"app.kubernetes.io/instance={RELEASE}")
        texts = [m["data"]["config.yaml"] for m in maps
                 if "config.yaml" in (m.get("data") or {})]
        if len(texts) != 1:
            raise RuntimeError(f"expected one chart ConfigMap with config.yaml in "
                               f"{self.namespace}, found {len(texts)}")
        path = self.workdir / "fitgate.yaml"
        path.write_text(texts[0])
        return path

    # -- the serve processes -----------------------------------------------------------

    async def start(self, index: int = 0) -> runner.LocalProcess:
        """Start replica ``index`` (a new process; the previous one must be stopped)."""
        creds = self.local.token_for(await self.service_account(), self.namespace)
        health = processes.free_port()
        # Replica 0 serves the URL the chart's webhook configurations call; the others
        # serve a port of their own (the API server calls one URL).
        webhook = self.webhook_port if index == 0 else processes.free_port()
        argv = [sys.executable, "-m", "admission.app.cli", "serve",
                f"--config={self.workdir / 'fitgate.yaml'}",
                f"--kubeconfig={creds.kubeconfig}", f"--identity=e2e-{index}",
                "--health-address=127.0.0.1", f"--health-port={health}",
                f"--webhook-port={webhook}", f"--cert-dir={self.workdir / 'webhook-certs'}",
                "--provisioning-wait=120", "--log-level=debug"]
        name = f"fitgate-serve-{index}-{len(self.replicas)}"
        proc = await self.e2e.start_process(
            name, argv, env={"PYTHONUNBUFFERED": "1"}, cwd=REPO,
            ready_url=f"http://127.0.0.1:{health}/healthz", timeout=READY_TIMEOUT_S)
        self.health_ports[index] = health
        while len(self.replicas) <= index:
            self.replicas.append(proc)
        self.replicas[index] = proc
        return proc

    def metrics_url(self, index: int = 0) -> str:
        """Replica ``index``'s /metrics (its health server)."""
        return f"http://127.0.0.1:{self.health_ports[index]}/metrics"

    def pids(self) -> dict[str, int]:
        """The processes of this test's cluster and fitgate's replicas, by name (for CPU
        accounting): "fitgate" is replica 0, the others "fitgate-<index>"."""
        out = {p.name: p.popen.pid for p in self.local.procs}
        for i, proc in enumerate(self.replicas):
            if proc.pid is not None:
                out["fitgate" if i == 0 else f"fitgate-{i}"] = proc.pid
        return out

    async def leader(self) -> str | None:
        """The identity holding the chart's leader-election Lease (``e2e-<index>``)."""
        config = yaml.safe_load((self.workdir / "fitgate.yaml").read_text())
        lease = await self.e2e.kube.get("coordination.k8s.io/v1", "Lease",
                                        str(config["lease_name"]), self.namespace)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return str(holder) if holder else None

    async def wait_active(self, timeout: float = READY_TIMEOUT_S) -> None:
        """fitgate's AdmissionCheck Active (a leader runs the controllers)."""
        async def active() -> bool:
            for proc in self.replicas:
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited ({proc.returncode}):\n"
                                       f"{proc.log_tail(40)}")
            check = await self.e2e.kube.get("kueue.x-k8s.io/v1beta2", "AdmissionCheck",
                                            CHECK_NAME)
            return kube.has_condition(check, "Active")
        await kube.wait_for(active, timeout, f"AdmissionCheck {CHECK_NAME} Active")


def _checks_of(cluster_queue: dict[str, Any]) -> set[str]:
    """The AdmissionChecks a ClusterQueue names, in either of Kueue's two spellings."""
    spec = cluster_queue.get("spec") or {}
    named = {str(c) for c in spec.get("admissionChecks") or ()}
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or ()
    return named | {str(c.get("name")) for c in strategy}
