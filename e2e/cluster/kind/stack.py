"""The stack on the offline kind cluster, installed as users install it.

- the fake DRA kubelet plugin: ``dra-driver.yaml`` (DaemonSet, RBAC, DeviceClasses), its
  image preloaded in the node image;
- Kueue v0.19.2 from its own manifests (``config/default`` of its Go module, rendered with
  ``kubectl kustomize``) with the image built from our Kueue binary (preloaded) and its
  configuration's ``resources.deviceClassMappings`` mapping the GPU DeviceClass to a quota
  resource;
- the autoscaler's ProvisioningRequest CRD (``autoscaling.x-k8s.io``, from the
  cluster-autoscaler apis module the local cluster uses), as on a cluster whose autoscaler
  serves ProvisioningRequests; no autoscaler runs, so a request fitgate makes stays
  unanswered;
- fitgate with ``helm install charts/fitgate``, only the image overridden; the image is put
  onto the nodes with ``kind load docker-image``.

``install`` does all of it on a new cluster, in that order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import yaml

from e2e.cluster.kind.cluster import HERE, REPO, KindCluster, tool

KUEUE_IMAGE = "fitgate.local/kueue:v0.19.2"
KUEUE_NAMESPACE = "kueue-system"
FITGATE_NAMESPACE = "fitgate-system"
DRIVER = "dra.kind.fitgate.io"
GPU_CLASS = "gpu.kind.fitgate.io"
NIC_CLASS = "nic.kind.fitgate.io"
MIG_CLASS = "mig.kind.fitgate.io"
# The quota resource Kueue counts each DeviceClass's devices as.
KUEUE_DRA_RESOURCES = {"kind.fitgate.io/gpu": GPU_CLASS, "kind.fitgate.io/nic": NIC_CLASS,
                       "kind.fitgate.io/mig": MIG_CLASS}
ROLLOUT_TIMEOUT_S = 300
BUILD_IMAGE = REPO / "e2e" / "cluster" / "container" / "build-image.sh"


def install_driver(kc: KindCluster) -> None:
    """The DaemonSet on every worker, then every worker's slices published."""
    kc.kubectl("apply", "--server-side", "-f", str(HERE / "dra-driver.yaml"))
    kc.kubectl("-n", "kind-dra-driver", "rollout", "status", "daemonset/kind-dra-driver",
               f"--timeout={ROLLOUT_TIMEOUT_S}s", timeout=ROLLOUT_TIMEOUT_S + 30)
    kc.wait(lambda: _slices_published(kc), ROLLOUT_TIMEOUT_S,
            "the fake driver's ResourceSlices on every node")


def _slices_published(kc: KindCluster) -> bool:
    items = json.loads(kc.kubectl("get", "resourceslices", "-o", "json").stdout)["items"]
    nodes = {s["spec"].get("nodeName") for s in items if s["spec"]["driver"] == DRIVER}
    return nodes >= set(kc.workers())


def kueue_manifests(kc: KindCluster) -> list[dict[str, Any]]:
    """Kueue's config/default, with our image and our configuration additions."""
    from e2e.cluster.local import build
    src = build.module_source("sigs.k8s.io/kueue", build.KUEUE_VERSION, via="kueue")
    rendered = kc.run(str(tool("kubectl")), "kustomize", str(src / "config" / "default"),
                      timeout=300).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    found_image = found_config = False
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "kueue-controller-manager":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "manager":
                    c["image"] = KUEUE_IMAGE
                    c["imagePullPolicy"] = "Never"
                    found_image = True
            doc["spec"]["replicas"] = 1
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "kueue-manager-config":
            config = yaml.safe_load(doc["data"]["controller_manager_config.yaml"])
            config.setdefault("resources", {})["deviceClassMappings"] = [
                {"name": resource, "deviceClassNames": [cls]}
                for resource, cls in KUEUE_DRA_RESOURCES.items()]
            doc["data"]["controller_manager_config.yaml"] = yaml.safe_dump(config)
            found_config = True
    if not (found_image and found_config):
        raise RuntimeError(f"Kueue's config/default under {src} has no manager container "
                           "or no kueue-manager-config ConfigMap: the manifests changed")
    return docs


def install_kueue(kc: KindCluster) -> None:
    docs = kueue_manifests(kc)
    kc.kubectl("apply", "--server-side", "-f", "-",
               input="\n---\n".join(yaml.safe_dump(d) for d in docs), timeout=300)
    kc.kubectl("-n", KUEUE_NAMESPACE, "rollout", "status",
               "deployment/kueue-controller-manager", f"--timeout={ROLLOUT_TIMEOUT_S}s",
               timeout=ROLLOUT_TIMEOUT_S + 30)
    # The webhooks answer once the manager serves them: a server-side dry run proves it.
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": "fitgate-kind-webhook-probe"}}
    kc.wait(lambda: kc.kubectl("create", "--dry-run=server", "-f", "-",
                               input=json.dumps(probe), check=False).returncode == 0,
            ROLLOUT_TIMEOUT_S, "Kueue's webhooks")


def install_provisioning_request_crd(kc: KindCluster) -> None:
    """The ProvisioningRequest CRD, established."""
    from e2e.cluster.local import build
    src = build.module_source("k8s.io/autoscaler/cluster-autoscaler/apis",
                              build.CA_APIS_VERSION, via="kueue")
    kc.kubectl("apply", "--server-side", "-f",
               str(src / "config" / "crd" / "autoscaling.x-k8s.io_provisioningrequests.yaml"))
    kc.kubectl("wait", "--for=condition=Established", "--timeout=60s",
               "crd/provisioningrequests.autoscaling.x-k8s.io", timeout=90)


def fitgate_image(env: dict[str, str]) -> str:
    """Build (warm: reuse) fitgate's image as ``make image`` does; return its tag."""
    out = subprocess.run([str(BUILD_IMAGE), sys.executable], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"make image failed:\n{out.stdout}\n{out.stderr}")
    images = subprocess.run(["docker", "image", "ls", "--format",
                             "{{.Repository}}:{{.Tag}}", "fitgate"], env=env,
                            capture_output=True, text=True, timeout=60, check=True)
    tags = [t for t in images.stdout.split() if ":src-" in t]
    if len(tags) != 1:
        raise RuntimeError(f"expected one fitgate:src-* image, found {tags}")
    return tags[0]


def install(kc: KindCluster, image: str, extra: tuple[str, ...] = ()) -> None:
    """The whole stack on a new cluster: driver, ProvisioningRequest CRD, Kueue, fitgate
    (`image`, loaded onto the nodes; `extra` helm arguments)."""
    install_driver(kc)
    install_provisioning_request_crd(kc)
    install_kueue(kc)
    kc.load(image)
    install_fitgate(kc, image, extra=extra)


def install_fitgate(kc: KindCluster, image: str, release: str = "fitgate",
                    extra: tuple[str, ...] = ()) -> None:
    """``helm install charts/fitgate`` (or upgrade) with only the image overridden."""
    repo, _, tag = image.rpartition(":")
    kc.run(str(tool("helm")), "upgrade", "--install", release, str(REPO / "charts" / "fitgate"),
           "--kubeconfig", str(kc.kubeconfig), "--namespace", FITGATE_NAMESPACE,
           "--create-namespace", "--set", f"image.repository={repo}",
           "--set", f"image.tag={tag}", *extra, "--wait",
           f"--timeout={ROLLOUT_TIMEOUT_S}s", timeout=ROLLOUT_TIMEOUT_S + 60)


def upgrade_fitgate_async(kc: KindCluster, args: tuple[str, ...],
                          release: str = "fitgate") -> subprocess.Popen[str]:
    """``helm upgrade ... --wait`` started in the background (stdout+stderr piped)."""
    return subprocess.Popen(
        [str(tool("helm")), "upgrade", release, str(REPO / "charts" / "fitgate"),
         "--kubeconfig", str(kc.kubeconfig), "--namespace", FITGATE_NAMESPACE, *args,
         "--wait", f"--timeout={ROLLOUT_TIMEOUT_S}s"],
        env=kc.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

