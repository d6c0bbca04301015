"""What a user submits on the offline kind cluster, and how it is read back (kubectl).

Builders for the Kueue queue objects with fitgate's AdmissionCheck, ResourceClaimTemplates
on the fake driver's DeviceClasses, Jobs whose pods claim devices, and a NodeShape that
describes a node like a live worker (its allocatable and its published ResourceSlices), so
that fitgate can plan new nodes of it. Used by ``e2e/tests/test_kind.py`` and
``e2e/demo_kind.py``.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from e2e.cluster.kind import stack
from e2e.cluster.kind.cluster import KindCluster

WORKLOAD_IMAGE = "fitgate.local/kind-workload:latest"
CHECK = "fitgate"  # the chart's AdmissionCheck
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
ENV_PREFIX = "FITGATE_DEVICE_"  # the fake driver's CDI spec: one variable per device
SHAPE_LABEL = "kind.fitgate.io/shape"
ROLLOUT_TIMEOUT_S = 120


def apply(kc: KindCluster, *objects: dict[str, Any]) -> None:
    kc.kubectl("apply", "--server-side", "-f", "-",
               input="\n---\n".join(json.dumps(o) for o in objects))


def get(kc: KindCluster, *args: str) -> Any:
    return json.loads(kc.kubectl("get", *args, "-o", "json").stdout)


def condition(obj: dict[str, Any], kind: str) -> bool:
    """Whether the object's condition `kind` is True."""
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def queues(kc: KindCluster, namespace: str, queue: str) -> None:
    """A ResourceFlavor, a ClusterQueue `queue` with fitgate's AdmissionCheck (quota for
    CPU, memory and the driver's devices) and a LocalQueue `queue` in `namespace`; returns
    once the check and the ClusterQueue are Active."""
    quota = {"cpu": "100", "memory": "100Gi",
             **{r: "64" for r in stack.KUEUE_DRA_RESOURCES}}
    apply(kc,
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
           "metadata": {"name": "default"}, "spec": {}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
           "metadata": {"name": queue},
           "spec": {"namespaceSelector": {},
                    "resourceGroups": [{"coveredResources": list(quota), "flavors": [{
                        "name": "default", "resources": [
                            {"name": r, "nominalQuota": q} for r, q in quota.items()]}]}],
                    "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]}}},
          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
           "metadata": {"name": queue, "namespace": namespace},
           "spec": {"clusterQueue": queue}})
    kc.wait(lambda: condition(get(kc, "admissioncheck", CHECK), "Active"), ROLLOUT_TIMEOUT_S,
            f"fitgate's AdmissionCheck {CHECK} Active")
    kc.wait(lambda: condition(get(kc, "clusterqueue", queue), "Active"), ROLLOUT_TIMEOUT_S,
            f"ClusterQueue {queue} Active")


def claim_template(name: str, namespace: str, device_class: str, count: int,
                   match_attribute: str | None = None) -> dict[str, Any]:
    """`count` devices of `device_class` (all sharing `match_attribute`, if given)."""
    spec: dict[str, Any] = {"devices": {"requests": [{"name": "devices", "exactly": {
        "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}}
    if match_attribute:
        spec["devices"]["constraints"] = [{"requests": ["devices"],
                                           "matchAttribute": match_attribute}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": spec}}


def job(name: str, namespace: str, queue: str, claims: dict[str, str], script: str,
        pods: int = 1) -> dict[str, Any]:
    """A suspended Job of `pods` pods on `queue`, each pod claiming one ResourceClaim per
    entry of `claims` (claim name → template name) and running `script` in a shell."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {"parallelism": pods, "completions": pods, "suspend": True,
                 "backoffLimit": 0,
                 "template": {"spec": {
                     "restartPolicy": "Never",
                     "resourceClaims": [{"name": c, "resourceClaimTemplateName": t}
                                        for c, t in claims.items()],
                     "containers": [{
                         "name": "main", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
                         "command": ["/bin/sh", "-c", script],
                         "resources": {"requests": {"cpu": "50m", "memory": "16Mi"},
                                       "claims": [{"name": c} for c in claims]}}]}}},
    }


def workload_of(kc: KindCluster, namespace: str, job_name: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job `job_name` (None: not yet)."""
    for wl in get(kc, "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
        if any(r.get("kind") == "Job" and r.get("name") == job_name
               for r in wl["metadata"].get("ownerReferences", [])):
            return dict(wl)
    return None


def check_state(wl: dict[str, Any] | None) -> tuple[str, str] | None:
    """fitgate's entry of the Workload's admission checks: (state, message)."""
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == CHECK:
            return str(entry.get("state")), str(entry.get("message") or "")
    return None


def pods_of(kc: KindCluster, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return list(get(kc, "pods", "-n", namespace, "-l", f"{JOB_NAME_LABEL}={job_name}")["items"])


def node_shape(kc: KindCluster, name: str, node: str) -> dict[str, Any]:
    """A NodeShape promising nodes like the live `node` (`shape_of`)."""
    return shape_of(name, get(kc, "node", node), get(kc, "resourceslices")["items"])


def shape_of(name: str, node: dict[str, Any], slices: list[dict[str, Any]]
             ) -> dict[str, Any]:
    """A NodeShape `name` promising nodes like `node`: its allocatable cpu, memory and
    pods, and the ResourceSlices the fake driver publishes on it (without the node name);
    at most one node of it."""
    node_name = node["metadata"]["name"]
    allocatable = {k: v for k, v in node["status"]["allocatable"].items()
                   if k in ("cpu", "memory", "pods")}
    shaped = []
    for s in slices:
        spec = s["spec"]
        if spec.get("nodeName") != node_name or spec["driver"] != stack.DRIVER:
            continue
        one = {k: v for k, v in spec.items() if k not in ("nodeName", "pool")}
        one["pool"] = {"name": spec["pool"]["name"],
                       "resourceSliceCount": spec["pool"]["resourceSliceCount"]}
        shaped.append(one)
    if not shaped:
        raise RuntimeError(f"node {node_name} publishes no ResourceSlices of {stack.DRIVER}")
    return {"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {SHAPE_LABEL: name}, "allocatable": allocatable,
                     "resourceSlices": shaped, "maxNodes": 1}}


def device_env(logs: str) -> dict[str, str]:
    """The fake driver's variables a container printed (``env | grep ^FITGATE_DEVICE_``)."""
    return dict(line.split("=", 1) for line in logs.splitlines()
                if line.startswith(ENV_PREFIX) and "=" in line)


def json_stream(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a stream of concatenated, pretty-printed documents (what
    ``kubectl get --watch -o json`` prints), each as soon as its last line arrives."""
    decoder = json.JSONDecoder()
    buffer = ""
    for line in lines:
        buffer += line
        while buffer.strip():
            try:
                obj, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                break  # not complete yet
            buffer = buffer.lstrip()[end:]
            yield obj


class Watch:
    """Every version of the objects of one kind that ``kubectl get --watch -o json`` sees
    (the current ones first, then each change), collected by a reader thread until
    `stop`; a context manager. `seen` is the list of object versions, oldest first."""

    def __init__(self, kc: KindCluster, *args: str) -> None:
        self.args = args
        self.seen: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [kc.kubectl_bin, "--kubeconfig", str(kc.kubeconfig), "get", *args, "--watch",
             "-o", "json"], env=kc.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"watch {' '.join(args)}")
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for obj in json_stream(self._proc.stdout):
            with self._lock:
                self.seen.append(obj)

    def versions(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.seen)

    def stop(self) -> None:
        """End the watch; raises if kubectl failed on its own (not by being stopped)."""
        code = self._proc.poll()
        if code is None:
            self._proc.terminate()
            self._proc.wait(timeout=30)
        self._reader.join(timeout=30)
        err = self._proc.stderr.read() if self._proc.stderr else ""
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()
        if code is not None:
            raise RuntimeError(f"kubectl get {' '.join(self.args)} --watch ended "
                               f"(exit {code}) before it was stopped: {err}")

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
