"""Small builders for the objects e2e tests create, as plain API dicts.

Each returns a complete manifest a user could have written; tests adjust the dict when
they need something unusual. Device specs are ResourceSlice ``resource.k8s.io/v1``
devices, passed to the fake DRA driver unchanged.
"""

from __future__ import annotations

from typing import Any

from e2e import dra_driver

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io/v1beta2"
AUTOSCALING = "autoscaling.x-k8s.io/v1"
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
# The resource name the local Kueue maps the fake driver's DeviceClass to (quota for GPUs).
KUEUE_DRA_RESOURCE = "e2e.fitgate.io/gpu"


def gpu_devices(count: int = 4, per_pcie_root: int = 2, model: str = "H100",
                memory: str = "80Gi", prefix: str = "gpu") -> list[dict[str, Any]]:
    """``count`` GPUs, ``per_pcie_root`` of them behind each PCIe root (pci0, pci1, ...)."""
    return [{"name": f"{prefix}-{i}",
             "attributes": {"index": {"int": i},
                            "model": {"string": model},
                            PCIE_ROOT: {"string": f"pci{i // per_pcie_root}"}},
             "capacity": {"memory": {"value": memory}}}
            for i in range(count)]


def shape(devices: list[dict[str, Any]], delay_seconds: float = 0,
          faulty_devices: list[dict[str, Any]] | None = None, faulty_nodes: str = "annotated",
          driver: str = dra_driver.DEFAULT_DRIVER) -> dict[str, Any]:
    """A node shape for the fake DRA driver (see ``e2e.dra_driver``)."""
    out: dict[str, Any] = {"driver": driver, "delaySeconds": delay_seconds,
                           "devices": devices, "faultyNodes": faulty_nodes}
    if faulty_devices is not None:
        out["faultyDevices"] = faulty_devices
    return out


def kwok_node(name: str, shape_name: str, labels: dict[str, str] | None = None,
              allocatable: dict[str, str] | None = None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A fake node kwok manages (Ready within a second) of the given shape."""
    alloc = allocatable or {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok",
                       dra_driver.SHAPE_LABEL: shape_name, **(labels or {})},
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0",
                            **(annotations or {})},
        },
        "spec": {},
        "status": {"allocatable": dict(alloc), "capacity": dict(alloc),
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                "kubeletVersion": "fake"}},
    }


def claim_template(name: str, namespace: str, count: int,
                   device_class: str = dra_driver.DEFAULT_DRIVER,
                   match_attribute: str | None = None) -> dict[str, Any]:
    """A ResourceClaimTemplate for ``count`` devices, optionally sharing one attribute."""
    spec: dict[str, Any] = {"devices": {"requests": [{
        "name": "devices",
        "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                    "count": count}}]}}
    if match_attribute:
        spec["devices"]["constraints"] = [{"requests": ["devices"],
                                           "matchAttribute": match_attribute}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": spec}}


def pod_spec(cpu: str = "1", claim_template_name: str | None = None,
             node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/fitgate/e2e:none",
                                 "resources": {"requests": {"cpu": cpu}}}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 0}
    if claim_template_name:
        spec["resourceClaims"] = [{"name": "devices",
                                   "resourceClaimTemplateName": claim_template_name}]
        container["resources"]["claims"] = [{"name": "devices"}]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return spec


def job(name: str, namespace: str, queue: str | None, parallelism: int = 1,
        cpu: str = "1", claim_template_name: str | None = None,
        node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job of ``parallelism`` pods (all must finish), suspended for Kueue to admit."""
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "suspend": bool(queue), "backoffLimit": 0,
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": pod_spec(cpu, claim_template_name, node_selector)}},
    }


def resource_flavor(name: str = "default", node_labels: dict[str, str] | None = None
                    ) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = dict(node_labels)
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": spec}


def cluster_queue(name: str, flavor: str = "default",
                  quota: dict[str, str] | None = None,
                  admission_checks: list[str] | None = None) -> dict[str, Any]:
    quota = quota or {"cpu": "1000", "memory": "10Ti", KUEUE_DRA_RESOURCE: "64"}
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": list(quota),
                            "flavors": [{"name": flavor, "resources": [
                                {"name": r, "nominalQuota": q} for r, q in quota.items()]}]}],
    }
    if admission_checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c}
                                                               for c in admission_checks]}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": spec}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def kueue_workload(name: str, namespace: str, queue: str, count: int = 1, cpu: str = "1",
                   claim_template_name: str | None = None) -> dict[str, Any]:
    """A bare Kueue Workload (no Job behind it) of one pod set."""
    return {"apiVersion": KUEUE, "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"queueName": queue, "podSets": [{
                "name": "main", "count": count,
                "template": {"spec": pod_spec(cpu, claim_template_name)}}]}}


def pod_template(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "template": {"spec": spec}}


def provisioning_request(name: str, namespace: str, pod_template_name: str, count: int,
                         provisioning_class: str = BEST_EFFORT_ATOMIC) -> dict[str, Any]:
    return {"apiVersion": AUTOSCALING, "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"provisioningClassName": provisioning_class,
                     "podSets": [{"podTemplateRef": {"name": pod_template_name},
                                  "count": count}]}}


PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"


def provisioning_request_config(name: str, provisioning_class: str = BEST_EFFORT_ATOMIC
                                ) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ProvisioningRequestConfig",
            "metadata": {"name": name},
            "spec": {"provisioningClassName": provisioning_class,
                     "managedResources": ["cpu"],
                     "retryStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 5,
                                       "backoffMaxSeconds": 10}}}


def admission_check(name: str, controller: str, parameters: dict[str, str] | None = None
                    ) -> dict[str, Any]:
    spec: dict[str, Any] = {"controllerName": controller}
    if parameters:
        spec["parameters"] = dict(parameters)
    return {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": spec}
