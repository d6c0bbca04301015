"""A real Kubernetes control plane as local processes: no containers, loopback only.

``LocalCluster.start()`` brings up, in this order, and waits until each is healthy:

1. etcd (client TLS, ``--unsafe-no-fsync``: data is throw-away);
2. kube-apiserver with TLS, ``--authorization-mode=Node,RBAC``, the DRA API
   (resource.k8s.io/v1 is GA and on) and the Workload/PodGroup API with the gates it
   needs, which depend on the Kubernetes minor (``KUBE_PROFILES``: scheduling.k8s.io
   v1alpha2 on 1.36, v1beta1 on 1.37);
3. kube-controller-manager (Job, ResourceClaim, GC, ... controllers; one service-account
   credential per controller, as kubeadm runs it) and kube-scheduler (which allocates
   DRA claims), each with its own RBAC identity and the same gates;
4. the cluster objects the rest needs: Kueue's CRDs (conversion webhooks pointed at the
   local Kueue by URL), its webhook configurations (same), the ProvisioningRequest CRD,
   the kwok provider's ConfigMaps for cluster-autoscaler; all read at run time from the
   Go module cache, none committed;
5. kwok, managing nodes annotated ``kwok.x-k8s.io/node=fake`` with stages that make nodes
   Ready and bound pods Running, and *keep* Job pods Running until a test asks for them
   to finish (annotation ``e2e.fitgate.io/complete=true``; see ``POD_COMPLETE_ANNOTATION``);
6. Kueue (manager as a local process in a mount namespace of its own, see
   ``_kueue_argv``; webhook server on 127.0.0.1 with a certificate of our CA;
   ``AdmissionGatedBy``, beta and on by default in v0.19; ProvisioningRequest admission
   checks; ``waitForPodsReady`` only when asked for, ``configure_kueue``);
7. fitgate's fake DRA driver (``e2e.dra_driver``), which publishes ResourceSlices for nodes
   by their shape label and creates the DeviceClasses;
8. cluster-autoscaler with the kwok cloud provider and ProvisioningRequests enabled; its
   DRA simulation only when asked for (``autoscaler_dra``, ``configure_autoscaler``);
9. or, instead of cluster-autoscaler (``karpenter=``, see ``KarpenterSetup``), Karpenter
   with its kwok cloud provider: its CRDs (NodePool, NodeClaim, NodeOverlay,
   CapacityBuffer, KWOKNodeClass) from its Go module, a KWOKNodeClass ``default``, and the
   instance types given, in the kwok provider's instance-types file. The nodes it launches
   carry ``kwok.x-k8s.io/node=fake`` (kwok makes them Ready) and the labels of their
   NodePool's template, so a shape label there makes the fake DRA driver publish their
   slices. Its DRA simulation (``IGNORE_DRA_REQUESTS=false``) only when asked for.

``stop()`` ends every process (process groups, SIGTERM then SIGKILL). Everything a run
writes lives in ``workdir``, which carries a marker file (``WORKDIR_MARKER``): ``start()``
deletes an existing workdir only when it has that marker, so a mistyped
``FITGATE_E2E_WORKDIR`` never costs anyone a directory. Nothing is written outside it.

Fault tests stop and start components mid-run: ``restart_apiserver()``,
``stop_component(name)`` / ``start_component(name)`` (``stop_autoscaler()`` /
``start_autoscaler()``), ``configure_kueue(...)``, ``configure_autoscaler(dra=...)``.
``token_for(sa, namespace)`` gives a ServiceAccount's bearer token and a kubeconfig that
uses it (never the admin's).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request
from typing import Any

import yaml

from e2e import builders, dra_driver
from e2e.cluster.local import build, pki, processes

SYSTEM_NAMESPACE = "fitgate-e2e-system"
KUEUE_NAMESPACE = "kueue-system"
SHAPE_LABEL = dra_driver.SHAPE_LABEL
NODEGROUP_LABEL = "e2e.fitgate.io/nodegroup"
POD_COMPLETE_ANNOTATION = "e2e.fitgate.io/complete"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
DRIVER_NAME = dra_driver.DEFAULT_DRIVER
# Kueue (KueueDRAIntegration, beta and on in v0.18) counts DRA devices against quota only
# for DeviceClasses mapped to a resource name; ClusterQueues give quota for that name.
KUEUE_DRA_RESOURCE = builders.KUEUE_DRA_RESOURCE


@dataclasses.dataclass(frozen=True)
class KubeProfile:
    """What differs between the Kubernetes minors the harness runs."""

    feature_gates: str
    runtime_config: str
    workload_api: str  # the scheduling.k8s.io version serving Workload and PodGroup
    controllers: str  # kube-controller-manager --controllers


# resource.k8s.io/v1 is GA and on by default; named anyway. v1beta1/v1beta2 serve the
# 1.33-era cluster-autoscaler's informers. 1.37 moved Workload/PodGroup to v1beta1 (beta
# APIs are off by default, hence the runtime config), removed v1alpha2, and dropped the
# GangScheduling gate (gang scheduling follows GenericWorkload there). nodeipam would need
# pod CIDRs; the cloud controllers need a cloud (1.37 no longer has them in KCM at all).
_RESOURCE_APIS = ("resource.k8s.io/v1=true,resource.k8s.io/v1beta1=true,"
                  "resource.k8s.io/v1beta2=true")
KUBE_PROFILES = {
    "1.36": KubeProfile(
        "GenericWorkload=true,GangScheduling=true,DRAWorkloadResourceClaims=true",
        f"scheduling.k8s.io/v1alpha2=true,{_RESOURCE_APIS}", "scheduling.k8s.io/v1alpha2",
        "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller"),
    "1.37": KubeProfile(
        "GenericWorkload=true,DRAWorkloadResourceClaims=true",
        f"scheduling.k8s.io/v1beta1=true,{_RESOURCE_APIS}", "scheduling.k8s.io/v1beta1",
        "*,-nodeipam"),
}


def kube_profile() -> KubeProfile:
    """The profile of the Kubernetes minor selected by ``FITGATE_KUBE_VERSION``."""
    return KUBE_PROFILES[build.kube_minor()]


# Kueue reads its metrics certificate from the hard-coded /etc/kueue/metrics/certs when
# its internal certificate management is off (cmd/kueue/main.go, v0.19.2 too: no flag or
# config field moves it). Two clusters on one host must not share that directory, so each
# Kueue runs in a private mount namespace where /etc is an overlay whose upper layer, in
# this cluster's workdir, holds that cluster's certificate; the host's /etc is untouched.
KUEUE_METRICS_CERT_PATH = "kueue/metrics/certs"  # under /etc, as Kueue sees it
WORKDIR_MARKER = ".fitgate-e2e-workdir"

START_TIMEOUT_S = 120.0
KUBECTL_TIMEOUT_S = 120


@dataclasses.dataclass(frozen=True)
class NodeGroup:
    """A kwok node group cluster-autoscaler may grow: a template node of one shape."""

    name: str
    shape: str
    max_size: int = 4
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    allocatable: dict[str, str] = dataclasses.field(
        default_factory=lambda: {"cpu": "32", "memory": "256Gi", "pods": "110"})
    # The devices the fake DRA driver publishes for the group's nodes (its shape); None
    # leaves the shape to the tests (``Harness.define_shape``).
    devices: list[dict[str, Any]] | None = None


@dataclasses.dataclass(frozen=True)
class InstanceType:
    """One instance type of Karpenter's kwok cloud provider (its instance-types file)."""

    name: str
    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    price: float = 1.0
    zones: tuple[str, ...] = ("zone-a",)
    capacity_types: tuple[str, ...] = ("on-demand",)

    def to_json(self) -> dict[str, Any]:
        """The kwok provider's format (karpenter kwok/cloudprovider/helpers.go)."""
        return {
            "name": self.name, "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": self.cpu, "memory": self.memory, "pods": self.pods},
            "offerings": [{"Price": self.price, "Available": True, "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ct]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}
                for zone in self.zones for ct in self.capacity_types]}


@dataclasses.dataclass(frozen=True)
class KarpenterSetup:
    """Karpenter in place of cluster-autoscaler: the instance types its kwok provider
    offers, and whether its own DRA simulation is on (off by default upstream:
    ``IGNORE_DRA_REQUESTS=true``)."""

    instance_types: tuple[InstanceType, ...]
    dra: bool = False


KWOK_NODE_CLASS = "default"


@dataclasses.dataclass
class Ports:
    etcd_client: int = dataclasses.field(default_factory=processes.free_port)
    etcd_peer: int = dataclasses.field(default_factory=processes.free_port)
    apiserver: int = dataclasses.field(default_factory=processes.free_port)
    controller_manager: int = dataclasses.field(default_factory=processes.free_port)
    scheduler: int = dataclasses.field(default_factory=processes.free_port)
    kwok: int = dataclasses.field(default_factory=processes.free_port)
    kueue_webhook: int = dataclasses.field(default_factory=processes.free_port)
    kueue_health: int = dataclasses.field(default_factory=processes.free_port)
    kueue_metrics: int = dataclasses.field(default_factory=processes.free_port)
    autoscaler: int = dataclasses.field(default_factory=processes.free_port)
    driver_health: int = dataclasses.field(default_factory=processes.free_port)
    karpenter_metrics: int = dataclasses.field(default_factory=processes.free_port)
    karpenter_health: int = dataclasses.field(default_factory=processes.free_port)


def _log(msg: str) -> None:
    print(f"[fitgate-cluster] {msg}", file=sys.stderr, flush=True)


class LocalCluster:
    """The local control plane; use as a context manager or call start()/stop()."""

    def __init__(self, workdir: pathlib.Path, node_groups: tuple[NodeGroup, ...] = (),
                 with_autoscaler: bool = True,
                 kueue_config: dict[str, Any] | None = None,
                 autoscaler_dra: bool = False,
                 karpenter: KarpenterSetup | None = None) -> None:
        if karpenter is not None and with_autoscaler:
            raise ValueError("Karpenter and cluster-autoscaler would both grow the cluster: "
                             "pass with_autoscaler=False with karpenter=")
        self.karpenter = karpenter
        self.workdir = workdir.resolve()
        self.node_groups = node_groups
        self.with_autoscaler = with_autoscaler
        # Top-level fields merged into Kueue's Configuration, e.g.
        # {"waitForPodsReady": {"timeout": "30s"}}; see configure_kueue().
        self.kueue_config: dict[str, Any] = dict(kueue_config or {})
        # cluster-autoscaler's DRA simulation (--enable-dynamic-resource-allocation); off
        # by default, see configure_autoscaler().
        self.autoscaler_dra = autoscaler_dra
        self.kube_minor = build.kube_minor()
        self.profile = KUBE_PROFILES[self.kube_minor]
        self.ports = Ports()
        self.procs: list[processes.Process] = []
        self.binaries: dict[str, pathlib.Path] = {}
        self._starters: dict[str, Any] = {}  # component name -> its start step
        self.stopped: set[str] = set()  # components stopped on purpose (stop_component)
        self.pki_dir = self.workdir / "pki"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.timings: dict[str, float] = {}

    # -- public ------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def env(self) -> dict[str, str]:
        """Environment for clients: KUBECONFIG plus where the binaries are."""
        return {"KUBECONFIG": str(self.kubeconfig),
                "FITGATE_E2E_KUBECTL": str(self.binaries.get("kubectl", "")),
                "FITGATE_E2E_HELM": str(self.binaries.get("helm", ""))}

    def start(self) -> None:
        started = time.monotonic()
        ended = processes.kill_recorded(self.workdir)
        if ended:
            _log("ended processes an earlier run left behind: " + ", ".join(ended))
        self.binaries = build.ensure(minor=self.kube_minor)
        if self.karpenter is not None:
            self.binaries.update(build.ensure(["karpenter"], minor=self.kube_minor))
        # A fresh cluster every time: no etcd data, certificates or logs of an earlier run.
        prepare_workdir(self.workdir)
        for d in ("etcd-data", "logs", "pids"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        try:
            self._step("pki", self._make_pki)
            self._starters = {
                "etcd": self._start_etcd, "kube-apiserver": self._start_apiserver,
                "kube-controller-manager": self._start_kcm,
                "kube-scheduler": self._start_scheduler, "kwok": self._start_kwok,
                "kueue": self._start_kueue, "fake-dra-driver": self._start_driver,
                "cluster-autoscaler": self._start_autoscaler,
                "karpenter": self._start_karpenter}
            self._step("etcd", self._start_etcd)
            self._step("kube-apiserver", self._start_apiserver)
            self._step("kube-controller-manager + kube-scheduler", self._start_kcm_scheduler)
            self._step("cluster objects", self._install_objects)
            self._step("kwok", self._start_kwok)
            self._step("kueue", self._start_kueue)
            self._step("fake DRA driver", self._start_driver)
            if self.with_autoscaler:
                self._step("cluster-autoscaler", self._start_autoscaler)
            if self.karpenter is not None:
                self._step("karpenter", self._start_karpenter)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - started
        _log(f"cluster up in {self.timings['total']:.1f}s; KUBECONFIG={self.kubeconfig}")
        (self.workdir / "cluster.json").write_text(json.dumps(
            {"kubeconfig": str(self.kubeconfig), "server": self.server,
             "kubernetes": build.kube_version(self.kube_minor),
             "pids": {p.name: p.popen.pid for p in self.procs},
             "ports": dataclasses.asdict(self.ports), "timings_s": self.timings}, indent=2))

    def stop(self) -> None:
        """End every process, newest first; bounded; safe to call twice."""
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()
        processes.kill_recorded(self.workdir)

    def check_alive(self) -> None:
        """Raise if a component died (with the end of its log)."""
        for proc in self.procs:
            if proc.name not in self.stopped and not proc.alive():
                raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}); "
                                   f"log {proc.log_path}:\n{proc.log_tail()}")

    def kubectl(self, *args: str, input_text: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the cached kubectl against this cluster (bounded in time)."""
        proc = subprocess.run([str(self.binaries["kubectl"]), "--kubeconfig",
                               str(self.kubeconfig), *args], input=input_text,
                              capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S,
                              check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply a list of objects."""
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        self.kubectl("apply", "--server-side", "--force-conflicts",
                     "--field-manager=fitgate-e2e", "-f", "-", input_text=text)

    def process(self, name: str) -> processes.Process:
        """The running process of component ``name`` (e.g. ``"kueue"``)."""
        for proc in self.procs:
            if proc.name == name:
                return proc
        raise KeyError(f"no component {name!r} is running; running: "
                       + ", ".join(p.name for p in self.procs))

    # -- credentials -------------------------------------------------------------------

    def token_for(self, service_account: str, namespace: str, duration: str = "1h",
                  create: bool = False) -> Credentials:
        """A bearer token of ``namespace/service_account`` and a kubeconfig that uses it.

        The token comes from the TokenRequest API (``kubectl create token``), so it has
        exactly the ServiceAccount's RBAC: run ``fitgate serve`` with it as the chart
        would, never as admin. ``create`` makes the ServiceAccount first if it is missing.
        """
        if create:
            self.apply([{"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": service_account, "namespace": namespace}}])
        token = self.kubectl("create", "token", service_account, "-n", namespace,
                             f"--duration={duration}").stdout.strip()
        path = self.workdir / "tokens" / f"{namespace}.{service_account}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        pki.write_token_kubeconfig(path, self.server, self.ca.ca.cert, token,
                                   f"{namespace}:{service_account}", namespace)
        return Credentials(token, path)

    # -- faults: stop, start and restart components mid-run -----------------------------

    def stop_component(self, name: str) -> None:
        """Stop one component (SIGTERM, bounded, then SIGKILL); ``start_component`` brings
        it back with the same ports, certificates and data."""
        self.process(name).stop()
        self.stopped.add(name)

    def start_component(self, name: str) -> None:
        """Start a stopped component again and wait until it is healthy (bounded)."""
        if name not in self._starters:
            raise KeyError(f"unknown component {name!r}; known: " + ", ".join(self._starters))
        with contextlib.suppress(KeyError):
            if self.process(name).alive():
                raise RuntimeError(f"{name} is running; stop it first")
        start = time.monotonic()
        self._starters[name]()
        self.stopped.discard(name)
        _log(f"{name}: started again in {time.monotonic() - start:.1f}s")

    def start_stopped(self) -> list[str]:
        """Start every component a test stopped and left stopped; returns their names."""
        names = [p.name for p in self.procs if p.name in self.stopped]
        for name in names:
            self.start_component(name)
        return names

    def restart_component(self, name: str) -> None:
        self.stop_component(name)
        self.start_component(name)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port (etcd keeps the data);
        returns once it is ready. Clients see connection errors in between."""
        self.restart_component("kube-apiserver")

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (physically), through its v3
        JSON gateway on the client URL; returns that revision. A watch from an older
        resourceVersion that reaches etcd then gets "required revision has been
        compacted" (410 Gone at the API server)."""
        ctx = processes.https_context(self.ca.ca.cert, self.apiserver_etcd_client.cert,
                                      self.apiserver_etcd_client.key)
        base = f"https://127.0.0.1:{self.ports.etcd_client}/v3/kv"

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            req = urllib.request.Request(f"{base}/{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"},
                                         method="POST")
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                out: dict[str, Any] = json.loads(resp.read() or b"{}")
                return out
        # A range read of one (absent) key answers with the store's current revision.
        head = post("range", {"key": base64.b64encode(b"/fitgate-e2e-none").decode()})
        revision = int(head["header"]["revision"])
        post("compaction", {"revision": str(revision), "physical": True})
        _log(f"etcd: compacted up to revision {revision}")
        return revision

    def stop_autoscaler(self) -> None:
        self.stop_component("cluster-autoscaler")

    def start_autoscaler(self) -> None:
        self.start_component("cluster-autoscaler")

    def configure_kueue(self, **fields: Any) -> None:
        """Restart Kueue with these top-level Configuration fields (None removes one),
        e.g. ``configure_kueue(waitForPodsReady={"timeout": "30s"})``."""
        for key, value in fields.items():
            if value is None:
                self.kueue_config.pop(key, None)
            else:
                self.kueue_config[key] = value
        self.restart_component("kueue")

    def configure_autoscaler(self, dra: bool) -> None:
        """Restart cluster-autoscaler with its DRA simulation on or off
        (``--enable-dynamic-resource-allocation``): with it on, the autoscaler reads
        ResourceSlices, ResourceClaims and DeviceClasses and simulates kube-scheduler's DRA
        plugin on existing nodes and on node-group templates (e2e/scenarios/peers.py).
        Put it back in a ``finally``: the cluster is shared by the session."""
        self.autoscaler_dra = dra
        self.restart_component("cluster-autoscaler")

    def configure_karpenter(self, dra: bool) -> None:
        """Restart Karpenter with its DRA simulation on or off (``IGNORE_DRA_REQUESTS``):
        under a second, where a second cluster takes about 10 s. NodeClaims and nodes stay.
        Put it back in a ``finally``: the cluster is shared by the test module."""
        if self.karpenter is None:
            raise RuntimeError("this cluster runs no Karpenter (LocalCluster(karpenter=...))")
        self.karpenter = dataclasses.replace(self.karpenter, dra=dra)
        self.restart_component("karpenter")

    def autoscaler_status(self) -> dict[str, Any] | None:
        """cluster-autoscaler's status ConfigMap, parsed (None before its first loop)."""
        proc = self.kubectl("get", "configmap", "cluster-autoscaler-status", "-n",
                            SYSTEM_NAMESPACE, "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        cm = json.loads(proc.stdout)
        status = _load_yaml((cm.get("data") or {}).get("status") or "null")
        if not isinstance(status, dict):
            return None
        status["resourceVersion"] = cm["metadata"]["resourceVersion"]
        return status

    # -- steps -------------------------------------------------------------------------

    def _step(self, name: str, fn: Any) -> None:
        start = time.monotonic()
        fn()
        self.timings[name] = round(time.monotonic() - start, 2)
        _log(f"{name}: ready in {self.timings[name]:.1f}s")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
               exe: str | None = None) -> processes.Process:
        """Start a component; a restarted one keeps its place in the teardown order."""
        proc = processes.Process(name, argv, self.workdir, env, exe=exe)
        for i, old in enumerate(self.procs):
            if old.name == name:
                old.stop()
                self.procs[i] = proc
                break
        else:
            self.procs.append(proc)
        return proc

    def _make_pki(self) -> None:
        ca = pki.Authority(self.pki_dir)
        self.ca = ca
        loop = ("127.0.0.1",)
        self.etcd_cert = ca.issue("etcd", "/CN=etcd", ips=loop, dns=("localhost",))
        self.apiserver_cert = ca.issue(
            "kube-apiserver", "/CN=kube-apiserver", ips=(*loop, "10.96.0.1"),
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"))
        self.apiserver_etcd_client = ca.issue("apiserver-etcd-client",
                                              "/O=system:masters/CN=kube-apiserver-etcd")
        self.apiserver_kubelet_client = ca.issue("apiserver-kubelet-client",
                                                 "/O=system:masters/CN=kube-apiserver-kubelet")
        self.front_proxy_client = ca.issue("front-proxy-client", "/CN=front-proxy-client")
        self.admin_cert = ca.issue("admin", "/O=system:masters/CN=fitgate-e2e-admin")
        self.scheduler_cert = ca.issue("kube-scheduler", "/CN=system:kube-scheduler",
                                       ips=loop, dns=("localhost",))
        self.kcm_cert = ca.issue("kube-controller-manager",
                                 "/CN=system:kube-controller-manager", ips=loop,
                                 dns=("localhost",))
        self.kueue_cert = ca.issue("kueue-webhook", "/CN=kueue-webhook", ips=loop,
                                   dns=("localhost",))
        self.sa_key = ca.service_account_key()
        pki.write_kubeconfig(self.kubeconfig, self.server, ca.ca.cert, self.admin_cert,
                             "fitgate-e2e-admin")
        self.scheduler_kubeconfig = pki.write_kubeconfig(
            self.workdir / "kube-scheduler.kubeconfig", self.server, ca.ca.cert,
            self.scheduler_cert, "system:kube-scheduler")
        self.kcm_kubeconfig = pki.write_kubeconfig(
            self.workdir / "kube-controller-manager.kubeconfig", self.server, ca.ca.cert,
            self.kcm_cert, "system:kube-controller-manager")

    def _start_etcd(self) -> None:
        p = self.ports
        client = f"https://127.0.0.1:{p.etcd_client}"
        peer = f"http://127.0.0.1:{p.etcd_peer}"
        proc = self._spawn("etcd", [
            str(self.binaries["etcd"]), "--name=fitgate-e2e",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=fitgate-e2e={peer}", "--initial-cluster-state=new",
            f"--cert-file={self.etcd_cert.cert}", f"--key-file={self.etcd_cert.key}",
            f"--trusted-ca-file={self.ca.ca.cert}", "--client-cert-auth",
            "--unsafe-no-fsync", "--auto-compaction-retention=1",
            "--quota-backend-bytes=2147483648", "--log-level=warn",
        ])
        ctx = processes.https_context(self.ca.ca.cert, self.apiserver_etcd_client.cert,
                                      self.apiserver_etcd_client.key)
        processes.wait_until("etcd /health", lambda: processes.probe(f"{client}/health", ctx),
                             START_TIMEOUT_S, proc)

    def _start_apiserver(self) -> None:
        p = self.ports
        proc = self._spawn("kube-apiserver", [
            str(self.binaries["kube-apiserver"]),
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={p.apiserver}",
            f"--etcd-servers=https://127.0.0.1:{p.etcd_client}",
            f"--etcd-cafile={self.ca.ca.cert}",
            f"--etcd-certfile={self.apiserver_etcd_client.cert}",
            f"--etcd-keyfile={self.apiserver_etcd_client.key}",
            f"--tls-cert-file={self.apiserver_cert.cert}",
            f"--tls-private-key-file={self.apiserver_cert.key}",
            f"--client-ca-file={self.ca.ca.cert}",
            f"--requestheader-client-ca-file={self.ca.ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.front_proxy_client.cert}",
            f"--proxy-client-key-file={self.front_proxy_client.key}",
            f"--kubelet-client-certificate={self.apiserver_kubelet_client.cert}",
            f"--kubelet-client-key={self.apiserver_kubelet_client.key}",
            f"--service-account-key-file={self.sa_key.cert}",
            f"--service-account-signing-key-file={self.sa_key.key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # no Service endpoints on loopback addresses
            "--enable-priority-and-fairness=false",
            f"--runtime-config={self.profile.runtime_config}",
            f"--feature-gates={self.profile.feature_gates}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--profiling=false", "--v=1",
        ])
        ctx = processes.https_context(self.ca.ca.cert, self.admin_cert.cert,
                                      self.admin_cert.key)
        processes.wait_until("kube-apiserver /readyz",
                             lambda: processes.probe(f"{self.server}/readyz", ctx),
                             START_TIMEOUT_S, proc)

    def _start_kcm_scheduler(self) -> None:
        self._start_kcm()
        self._start_scheduler()

    def _start_kcm(self) -> None:
        p = self.ports
        kcm = self._spawn("kube-controller-manager", [
            str(self.binaries["kube-controller-manager"]),
            f"--kubeconfig={self.kcm_kubeconfig}",
            f"--authentication-kubeconfig={self.kcm_kubeconfig}",
            f"--authorization-kubeconfig={self.kcm_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={p.controller_manager}",
            f"--tls-cert-file={self.kcm_cert.cert}",
            f"--tls-private-key-file={self.kcm_cert.key}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.sa_key.key}",
            f"--root-ca-file={self.ca.ca.cert}",
            f"--controllers={self.profile.controllers}",
            f"--feature-gates={self.profile.feature_gates}", "--v=1",
        ])
        ctx = processes.https_context(self.ca.ca.cert)
        processes.wait_until(
            "kube-controller-manager /healthz",
            lambda: processes.probe(f"https://127.0.0.1:{p.controller_manager}/healthz", ctx),
            START_TIMEOUT_S, kcm)

    def _start_scheduler(self) -> None:
        p = self.ports
        sched = self._spawn("kube-scheduler", [
            str(self.binaries["kube-scheduler"]),
            f"--kubeconfig={self.scheduler_kubeconfig}",
            f"--authentication-kubeconfig={self.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={self.scheduler_kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={p.scheduler}",
            f"--tls-cert-file={self.scheduler_cert.cert}",
            f"--tls-private-key-file={self.scheduler_cert.key}",
            "--leader-elect=false",
            f"--feature-gates={self.profile.feature_gates}", "--v=1",
        ])
        ctx = processes.https_context(self.ca.ca.cert)
        processes.wait_until(
            "kube-scheduler /readyz",
            lambda: processes.probe(f"https://127.0.0.1:{p.scheduler}/readyz", ctx),
            START_TIMEOUT_S, sched)

    # -- cluster objects ---------------------------------------------------------------

    def _kueue_source(self) -> pathlib.Path:
        return build.module_source("sigs.k8s.io/kueue", build.KUEUE_VERSION, via="kueue")

    def _install_objects(self) -> None:
        kueue_src = self._kueue_source()
        webhook_base = f"https://127.0.0.1:{self.ports.kueue_webhook}"
        ca_bundle = self.ca.ca_bundle_b64()
        objects: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
            for n in (KUEUE_NAMESPACE, SYSTEM_NAMESPACE)]
        objects += kueue_crds(kueue_src, webhook_base, ca_bundle)
        objects += kueue_webhooks(kueue_src, webhook_base, ca_bundle)
        apis_src = build.module_source("k8s.io/autoscaler/cluster-autoscaler/apis",
                                       build.CA_APIS_VERSION, via="kueue")
        crd_path = apis_src / "config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"
        objects.append(_load_yaml(crd_path.read_text()))
        objects += kwok_provider_configmaps(self.node_groups)
        shapes = {g.shape: yaml.safe_dump(builders.shape(g.devices), sort_keys=False)
                  for g in self.node_groups if g.devices is not None}
        if shapes:
            objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": dra_driver.SHAPES_CONFIGMAP,
                                         "namespace": SYSTEM_NAMESPACE},
                            "data": shapes})
        if self.karpenter is not None:
            objects += karpenter_crds(build.module_source(
                "sigs.k8s.io/karpenter", build.KARPENTER_VERSION, via="karpenter"))
        self.apply(objects)
        self._wait_crds_established()
        if self.karpenter is not None:
            # The CRD defaults its status to Ready (no controller manages kwok classes).
            self.apply([{"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                         "metadata": {"name": KWOK_NODE_CLASS}}])

    def _wait_crds_established(self, timeout: float = 60) -> None:
        """Poll (bounded) until every CRD is Established. Not ``kubectl wait``: it fails
        at once ("status.conditions accessor error") on a CRD created a moment ago whose
        status has no conditions yet."""
        deadline = time.monotonic() + timeout
        while True:
            crds = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
            waiting = [c["metadata"]["name"] for c in crds
                       if not any(x.get("type") == "Established" and x.get("status") == "True"
                                  for x in (c.get("status") or {}).get("conditions") or [])]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRDs not Established after {timeout:.0f}s: "
                                   + ", ".join(waiting))
            time.sleep(0.2)

    def _start_kwok(self) -> None:
        kwok_src = build.module_source("sigs.k8s.io/kwok", build.KWOK_VERSION, via="kwok")
        stages = self.workdir / "kwok-stages.yaml"
        stages.write_text(yaml.safe_dump_all(kwok_stages(kwok_src), sort_keys=False))
        port = self.ports.kwok
        proc = self._spawn("kwok", [
            str(self.binaries["kwok"]), f"--kubeconfig={self.kubeconfig}",
            f"--config={stages}", "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--manage-nodes-with-label-selector=", "--manage-single-node=",
            "--cidr=10.244.0.0/16", "--node-ip=10.0.0.1",
            "--node-lease-duration-seconds=40", f"--server-address=127.0.0.1:{port}",
        ])
        processes.wait_until("kwok /healthz",
                             lambda: processes.probe(f"http://127.0.0.1:{port}/healthz"),
                             START_TIMEOUT_S, proc)

    def _start_kueue(self) -> None:
        p = self.ports
        cert_dir = self.workdir / "kueue-certs"
        cert_dir.mkdir(exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(self.kueue_cert.cert.read_bytes())
        (cert_dir / "tls.key").write_bytes(self.kueue_cert.key.read_bytes())
        config: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p.kueue_health}"},
            "metrics": {"bindAddress": f"127.0.0.1:{p.kueue_metrics}"},
            "webhook": {"port": p.kueue_webhook, "host": "127.0.0.1",
                        "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "integrations": {"frameworks": ["batch/job"]},
            # AdmissionGatedBy is beta and on by default in v0.19: no gate needed. The
            # visibility API server would need certificates in /visibility.
            "featureGates": {"VisibilityOnDemand": False},
            "resources": {"deviceClassMappings": [
                {"name": KUEUE_DRA_RESOURCE, "deviceClassNames": [DRIVER_NAME]}]},
            **self.kueue_config,
        }
        config_path = self.workdir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv, env = self._kueue_argv([
            str(self.binaries["kueue"]), f"--config={config_path}",
            f"--kubeconfig={self.kubeconfig}", "--zap-log-level=2"])
        proc = self._spawn("kueue", argv, env={"KUBECONFIG": str(self.kubeconfig), **env},
                           exe=str(self.binaries["kueue"]))
        processes.wait_until(
            "kueue /readyz",
            lambda: processes.probe(f"http://127.0.0.1:{p.kueue_health}/readyz"),
            START_TIMEOUT_S, proc)
        # The webhooks answer once the manager serves them; prove it with a dry run.
        probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                 "metadata": {"name": "fitgate-e2e-webhook-probe"}}
        processes.wait_until(
            "kueue webhooks",
            lambda: self.kubectl("create", "--dry-run=server", "-f", "-",
                                 input_text=json.dumps(probe), check=False).returncode == 0,
            START_TIMEOUT_S, proc)

    def _kueue_argv(self, kueue: list[str]) -> tuple[list[str], dict[str, str]]:
        """Run Kueue in a private mount namespace whose /etc is an overlay holding this
        cluster's metrics certificate at /etc/kueue/metrics/certs (see
        ``KUEUE_METRICS_CERT_PATH``). Needs root (CI and the dev machines run as root);
        the host's /etc never changes, so clusters side by side do not clash."""
        if shutil.which("unshare") is None or os.geteuid() != 0:
            raise RuntimeError(
                "Kueue reads its metrics certificate from the fixed /etc/kueue/metrics/certs; "
                "to give each cluster its own, the harness runs Kueue in a private mount "
                "namespace (unshare --mount, util-linux), which needs root")
        layer = self.workdir / "kueue-etc"
        certs = layer / "upper" / KUEUE_METRICS_CERT_PATH
        certs.mkdir(parents=True, exist_ok=True)
        (layer / "work").mkdir(exist_ok=True)
        (certs / "tls.crt").write_bytes(self.kueue_cert.cert.read_bytes())
        (certs / "tls.key").write_bytes(self.kueue_cert.key.read_bytes())
        script = ('mount -t overlay fitgate-kueue-etc '
                  '-o "lowerdir=/etc,upperdir=$FITGATE_ETC_UPPER,workdir=$FITGATE_ETC_WORK" '
                  '/etc && exec "$@"')
        argv = ["unshare", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", script, "kueue", *kueue]
        return argv, {"FITGATE_ETC_UPPER": str(layer / "upper"),
                      "FITGATE_ETC_WORK": str(layer / "work")}

    def _start_driver(self) -> None:
        port = self.ports.driver_health
        proc = self._spawn("fake-dra-driver", [
            sys.executable, "-m", "e2e.dra_driver", f"--kubeconfig={self.kubeconfig}",
            f"--namespace={SYSTEM_NAMESPACE}", f"--health-port={port}",
        ], env={"PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[3])})
        processes.wait_until("fake DRA driver /healthz",
                             lambda: processes.probe(f"http://127.0.0.1:{port}/healthz"),
                             START_TIMEOUT_S, proc)

    def _start_autoscaler(self) -> None:
        port = self.ports.autoscaler
        proc = self._spawn("cluster-autoscaler", [
            str(self.binaries["cluster-autoscaler"]), f"--kubeconfig={self.kubeconfig}",
            "--cloud-provider=kwok", f"--namespace={SYSTEM_NAMESPACE}",
            "--enable-provisioning-requests=true", "--scan-interval=1s",
            "--leader-elect=false", "--scale-down-enabled=false",
            "--max-node-provision-time=2m", f"--address=127.0.0.1:{port}",
            "--expander=least-waste", "--v=2",
            # With its default protobuf content type this build fails to update
            # ProvisioningRequests ("does not implement the protobuf marshalling
            # interface"): CRDs speak JSON only.
            "--kube-api-content-type=application/json",
            f"--enable-dynamic-resource-allocation={str(self.autoscaler_dra).lower()}",
        ], env={"POD_NAMESPACE": SYSTEM_NAMESPACE, "KWOK_PROVIDER_MODE": "local",
                "KUBECONFIG": str(self.kubeconfig)})
        processes.wait_until(
            "cluster-autoscaler /health-check",
            lambda: processes.probe(f"http://127.0.0.1:{port}/health-check"),
            START_TIMEOUT_S, proc)

    def _start_karpenter(self) -> None:
        """Karpenter with its kwok cloud provider, as a local process (admin kubeconfig,
        no leader election). Its health and metrics servers bind every interface on
        their ports: Karpenter takes ports, not addresses."""
        assert self.karpenter is not None
        types = self.workdir / "karpenter-instance-types.json"
        types.write_text(json.dumps([t.to_json() for t in self.karpenter.instance_types],
                                    indent=1))
        p = self.ports
        proc = self._spawn("karpenter", [str(self.binaries["karpenter"])], env={
            "KUBECONFIG": str(self.kubeconfig), "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(p.karpenter_metrics),
            "HEALTH_PROBE_PORT": str(p.karpenter_health),
            "INSTANCE_TYPES_FILE_PATH": str(types), "LOG_LEVEL": "debug",
            # Short batches: the tests' pending pods are decided on within seconds.
            "BATCH_IDLE_DURATION": "1s", "BATCH_MAX_DURATION": "3s",
            "IGNORE_DRA_REQUESTS": str(not self.karpenter.dra).lower()})
        processes.wait_until(
            "karpenter /readyz",
            lambda: processes.probe(f"http://127.0.0.1:{p.karpenter_health}/readyz"),
            START_TIMEOUT_S, proc)


# -- manifests ---------------------------------------------------------------------------


def karpenter_crds(src: pathlib.Path) -> list[dict[str, Any]]:
    """Karpenter's CRDs from its module source: the core ones (NodePool, NodeClaim,
    NodeOverlay, CapacityBuffer) and the kwok provider's KWOKNodeClass."""
    paths = [*sorted((src / "pkg/apis/crds").glob("*.yaml")),
             *sorted((src / "kwok/apis/crds").glob("*.yaml"))]
    return [_load_yaml(p.read_text()) for p in paths]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: Kueue's CRDs are big


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # a safe loader (CSafeLoader or SafeLoader)


# CRDs whose older API version Kueue converts through its /convert webhook
# (config/components/crd/kustomization.yaml patches).
_KUEUE_CONVERTED = {"localqueues", "clusterqueues", "cohorts", "workloads",
                    "multikueueclusters"}


def kueue_crds(src: pathlib.Path, webhook_base: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's CRDs from its module source, with conversion served by the local Kueue."""
    crds = []
    for path in sorted((src / "config/components/crd/bases").glob("*.yaml")):
        crd = _load_yaml(path.read_text())
        if crd["spec"]["names"]["plural"] in _KUEUE_CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": f"{webhook_base}/convert",
                                             "caBundle": ca_bundle},
                            "conversionReviewVersions": ["v1"]}}
        crds.append(crd)
    return crds


def kueue_webhooks(src: pathlib.Path, webhook_base: str, ca_bundle: str
                   ) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, renamed ``kueue-*`` and pointed at a loopback URL.

    As Kueue's kustomization does, the webhooks for workload kinds skip the kube-system and
    kueue-system namespaces.
    """
    skip_system = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                         "operator": "NotIn",
                                         "values": ["kube-system", KUEUE_NAMESPACE]}]}
    out = []
    docs = yaml.safe_load_all((src / "config/components/webhook/manifests.yaml").read_text())
    for doc in docs:
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{webhook_base}{path}", "caBundle": ca_bundle}
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if "kueue.x-k8s.io" not in groups:
                hook["namespaceSelector"] = skip_system
        out.append(doc)
    return out


def kwok_stages(src: pathlib.Path) -> list[dict[str, Any]]:
    """kwok's own fast stages, except that Job pods finish only when a test says so.

    kwok v0.8.0 has no built-in stages any more; kwokctl passes these same files. Its
    ``pod-complete`` stage turns every Running Job pod Succeeded at once; ours instead
    waits for the annotation ``POD_COMPLETE_ANNOTATION=true`` on the pod.
    """
    base = src / "kustomize/stage"
    stages = [yaml.safe_load((base / rel).read_text()) for rel in (
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/fast/pod-delete.yaml")]
    complete = yaml.safe_load((base / "pod/fast/pod-complete.yaml").read_text())
    complete["metadata"]["name"] = "pod-complete-on-request"
    exprs = [e for e in complete["spec"]["selector"]["matchExpressions"]
             if "ownerReferences" not in e["key"]]
    exprs.append({"key": f'.metadata.annotations["{POD_COMPLETE_ANNOTATION}"]',
                  "operator": "In", "values": ["true"]})
    complete["spec"]["selector"]["matchExpressions"] = exprs
    stages.append(complete)
    stages.append(NODE_HOSTNAME_STAGE)
    return stages


# A kubelet labels its node kubernetes.io/hostname=<name>; nodes the kwok cloud provider
# adds copy their group's template labels and so lack it. Whatever pins a pod to a node by
# that label (fitgate's placements, topology spread, anti-affinity) needs it. kwok picks
# one of the stages matching a node at random by weight, so this one outweighs the others
# (weight 0) and runs first.
NODE_HOSTNAME_STAGE: dict[str, Any] = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
    "metadata": {"name": "node-hostname-label"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Node"},
        "weight": 1000,
        "selector": {"matchExpressions": [
            {"key": '.metadata.labels["kubernetes.io/hostname"]',
             "operator": "DoesNotExist"}]},
        "next": {"patches": [{
            "type": "merge", "root": "metadata",
            "template": "labels:\n  kubernetes.io/hostname: {{ .metadata.name | Quote }}\n"}]},
    },
}


def template_node(group: NodeGroup) -> dict[str, Any]:
    """The node template the kwok provider clones for ``group``."""
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              NODEGROUP_LABEL: group.name, SHAPE_LABEL: group.shape, **group.labels}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": group.name, "labels": labels,
            "annotations": {
                KWOK_NODE_ANNOTATION: "fake",
                "cluster-autoscaler.kwok.nodegroup/min-count": "0",
                "cluster-autoscaler.kwok.nodegroup/max-count": str(group.max_size),
                "cluster-autoscaler.kwok.nodegroup/desired-count": "0"}},
        "status": {"allocatable": dict(group.allocatable), "capacity": dict(group.allocatable),
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                "kubeletVersion": build.kube_version()}},
    }


def kwok_provider_configmaps(groups: tuple[NodeGroup, ...]) -> list[dict[str, Any]]:
    """The kwok cloud provider's config and node-template ConfigMaps."""
    config = {"apiVersion": "v1alpha1", "readNodesFrom": "configmap",
              "nodegroups": {"fromNodeLabelKey": NODEGROUP_LABEL},
              "nodes": {"skipTaint": True},
              "configmap": {"name": "kwok-provider-templates"}}
    templates = {"apiVersion": "v1", "kind": "List",
                 "items": [template_node(g) for g in groups]}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "kwok-provider-config", "namespace": SYSTEM_NAMESPACE},
         "data": {"config": yaml.safe_dump(config)}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "kwok-provider-templates", "namespace": SYSTEM_NAMESPACE},
         "data": {"templates": yaml.safe_dump(templates)}},
    ]


@dataclasses.dataclass(frozen=True)
class Credentials:
    """A ServiceAccount's bearer token and a kubeconfig file that uses only it."""

    token: str
    kubeconfig: pathlib.Path


def _unsafe_workdir(path: pathlib.Path) -> str | None:
    """Why ``path`` must never be deleted wholesale, or None."""
    path = path.resolve()
    home = pathlib.Path.home().resolve()
    repo = pathlib.Path(__file__).resolve().parents[3]
    if path == pathlib.Path(path.anchor) or len(path.parts) < 3:
        return "it is / or a top-level directory"
    if path in (home, repo, pathlib.Path.cwd().resolve()):
        return "it is $HOME, the checkout or the current directory"
    if path in home.parents or path in repo.parents:
        return "it contains $HOME or the checkout"
    return None


def prepare_workdir(workdir: pathlib.Path) -> None:
    """Empty ``workdir`` for a fresh run and mark it as the harness's.

    An existing directory is deleted only if it carries ``WORKDIR_MARKER`` (written here
    on every run) or is empty, and never if it is /, a top-level directory, $HOME, the
    checkout, the current directory or one of their parents.
    """
    reason = _unsafe_workdir(workdir)
    if reason:
        raise RuntimeError(f"refusing to use {workdir} as the cluster workdir: {reason}")
    if workdir.exists():
        if not workdir.is_dir():
            raise RuntimeError(f"cluster workdir {workdir} exists and is not a directory")
        if not (workdir / WORKDIR_MARKER).is_file() and any(workdir.iterdir()):
            raise RuntimeError(
                f"refusing to delete {workdir}: it is not empty and has no {WORKDIR_MARKER} "
                f"(so the e2e harness did not create it); remove it yourself or point "
                f"FITGATE_E2E_WORKDIR elsewhere")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / WORKDIR_MARKER).write_text(
        "work directory of fitgate's e2e local cluster; deleted by the next run\n")


def default_workdir() -> pathlib.Path:
    """``e2e/.run/cluster`` in the checkout (ignored by git), or ``$FITGATE_E2E_WORKDIR``."""
    env = os.environ.get("FITGATE_E2E_WORKDIR")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).resolve().parents[2] / ".run" / "cluster"
