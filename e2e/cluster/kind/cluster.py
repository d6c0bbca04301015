"""Create, use and delete fitgate's offline kind cluster (test infrastructure).

The node image comes from ``build-node.sh`` (binaries from Go modules, Debian's containerd
and runc, kind v0.33.0's node files, control-plane images built locally). kind creates the
nodes on the container engine from ``e2e/cluster/container/engine.sh``; then this module
gives every node the bridge CNI on its own pod CIDR (``node.spec.podCIDR``, allocated by
the controller manager) and a route to every other node's pod CIDR through that node's
address on kind's network: pods reach each other across nodes without kindnetd.

``python -m e2e.cluster.kind up|down|build`` is the command line (``__main__``).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
ENGINE = REPO / "e2e" / "cluster" / "container" / "engine.sh"
CONFIG = HERE / "kind-config.yaml"
READY_TIMEOUT_S = 300
CREATE_TIMEOUT_S = 900


def _log(msg: str) -> None:
    print(f"[kind] {msg}", file=sys.stderr, flush=True)


def engine_env() -> dict[str, str]:
    """The environment with DOCKER_HOST set to the engine ``engine.sh`` picks/starts."""
    out = subprocess.run([str(ENGINE)], capture_output=True, text=True, timeout=600,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"no container engine (engine.sh):\n{out.stderr}")
    env = dict(os.environ)
    for line in out.stdout.splitlines():
        if line.startswith("export DOCKER_HOST="):
            env["DOCKER_HOST"] = line.split("=", 1)[1]
    return env


def build_node_image(env: dict[str, str]) -> str:
    """Build (warm: reuse) the node image; return its tag."""
    out = subprocess.run([str(HERE / "build-node.sh"), sys.executable], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, text=True, timeout=3600, check=False)
    if out.returncode != 0:
        raise RuntimeError("build-node.sh failed (its output is above)")
    return out.stdout.strip().splitlines()[-1]


def tool(name: str) -> pathlib.Path:
    """A binary from the Go-module build cache (kind, kubectl, helm, ...)."""
    from e2e.cluster.local import build
    return build.ensure([name], "1.37")[name]


class KindCluster:
    """One kind cluster on the node image; ``delete()`` removes its containers."""

    def __init__(self, name: str, workdir: pathlib.Path, env: dict[str, str],
                 node_image: str) -> None:
        self.name = name
        self.workdir = workdir
        self.env = env
        self.node_image = node_image
        self.kubeconfig = workdir / "kubeconfig"
        self.kind = str(tool("kind"))
        self.kubectl_bin = str(tool("kubectl"))

    # -- commands -------------------------------------------------------------------------
    def run(self, *cmd: str, timeout: float = 300, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                             timeout=timeout, check=False, input=input)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {out.returncode}:\n"
                               f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out

    def kubectl(self, *args: str, timeout: float = 300, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args,
                        timeout=timeout, check=check, input=input)

    def nodes(self) -> list[str]:
        out = self.run(self.kind, "get", "nodes", "--name", self.name, check=False)
        return sorted(out.stdout.split()) if out.returncode == 0 else []

    def workers(self) -> list[str]:
        """The nodes without the control-plane role."""
        return [n for n in self.nodes() if not n.endswith("-control-plane")]

    def exec(self, node: str, *cmd: str, timeout: float = 120,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("docker", "exec", node, *cmd, timeout=timeout, check=check)

    # -- life cycle -----------------------------------------------------------------------
    def create(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.delete()  # a cluster of this name left by a crashed run
        start = time.monotonic()
        self.run(self.kind, "create", "cluster", "--name", self.name, "--image",
                 self.node_image, "--config", str(CONFIG), "--kubeconfig",
                 str(self.kubeconfig), "--retain", timeout=CREATE_TIMEOUT_S)
        _log(f"kind create cluster {self.name}: {time.monotonic() - start:.0f}s")
        self.setup_pod_network()
        self.wait_ready()
        _log(f"cluster {self.name} ready: {time.monotonic() - start:.0f}s")

    def delete(self) -> None:
        self.run(self.kind, "delete", "cluster", "--name", self.name, "--kubeconfig",
                 str(self.kubeconfig), timeout=300, check=False)

    def setup_pod_network(self) -> None:
        """Bridge CNI on each node's pod CIDR, plus routes to the other nodes' CIDRs."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            items = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)["items"]
            cidrs = {n["metadata"]["name"]: n["spec"].get("podCIDR") for n in items}
            if len(cidrs) == len(self.nodes()) and all(cidrs.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes without a pod CIDR after {READY_TIMEOUT_S}s: "
                                   f"{cidrs}")
            time.sleep(2)
        addrs = {}
        for n in items:
            internal = [a["address"] for a in n["status"].get("addresses", [])
                        if a["type"] == "InternalIP" and ":" not in a["address"]]
            addrs[n["metadata"]["name"]] = internal[0]
        for node, cidr in cidrs.items():
            conf = {"cniVersion": "0.4.0", "name": "fitgate-kind", "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": cidr}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}
            self.run("docker", "exec", "-i", node, "sh", "-c",
                     "cat > /etc/cni/net.d/10-fitgate-bridge.conflist",
                     input=json.dumps(conf, indent=1))
            for other, other_cidr in cidrs.items():
                if other != node:
                    self.exec(node, "ip", "route", "replace", str(other_cidr), "via",
                              addrs[other])

    def wait_ready(self) -> None:
        self.kubectl("wait", "--for=condition=Ready", "nodes", "--all",
                     f"--timeout={READY_TIMEOUT_S}s", timeout=READY_TIMEOUT_S + 30)
        self.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns",
                     f"--timeout={READY_TIMEOUT_S}s", timeout=READY_TIMEOUT_S + 30)
        self.kubectl("-n", "kube-system", "rollout", "status", "daemonset/kube-proxy",
                     f"--timeout={READY_TIMEOUT_S}s", timeout=READY_TIMEOUT_S + 30)

    def wait(self, ok: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ok`` every 2 s until it holds; fail naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not within {timeout:.0f}s")
            time.sleep(2)

    def load(self, *images: str) -> None:
        """Put local images onto every node (``kind load docker-image``)."""
        self.run(self.kind, "load", "docker-image", "--name", self.name, *images,
                 timeout=900)

    # -- diagnostics ----------------------------------------------------------------------
    def node_logs(self, lines: int = 80) -> str:
        """The end of every node's kubelet and containerd journal."""
        parts = []
        for node in self.nodes():
            for unit in ("kubelet", "containerd"):
                out = self.exec(node, "journalctl", "-u", unit, "--no-pager", "-n",
                                str(lines), check=False)
                parts.append(f"--- {node}: journalctl -u {unit} (last {lines}) ---\n"
                             f"{out.stdout}{out.stderr}")
        return "\n".join(parts)
