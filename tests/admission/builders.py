"""Builders for the pre-quota path's tests: queues, checks, Jobs, policies, a small GPU
cluster in stores, and a self-signed TLS pair for the webhook server."""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from admission.gate import predicates as gating
from admission.kube import kinds, store
from tests.gang import builders as gb

NS = "team-a"


def namespace(name: str = NS, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}


def admission_check(name: str = "topo-fit", controller: str = gating.CONTROLLER_NAME
                    ) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
            "metadata": {"name": name}, "spec": {"controllerName": controller}}


def cluster_queue(name: str = "gpu", *checks: str, v1beta1: bool = False,
                  **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"namespaceSelector": {}}
    if v1beta1:
        spec["admissionChecks"] = list(checks)
    elif checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": labels}, "spec": spec}


def local_queue(name: str = "q", cq: str = "gpu", ns: str = NS) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": cq}}


def job(name: str = "train", *, ns: str = NS, queue: str | None = "q", parallelism: int = 2,
        templates: tuple[str, ...] = ("gpus",), cpu: str = "8",
        annotations: Mapping[str, str] | None = None,
        node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    pod = gb.pod_set("main", cpu=cpu, templates=templates, node_selector=node_selector)
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if queue:
        meta["labels"] = {gating.QUEUE_LABEL: queue}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "suspend": True, "template": pod["template"]}}


def workload_of(job_obj: Mapping[str, Any], *, name: str | None = None,
                uid: str = "job-uid") -> dict[str, Any]:
    """The Workload Kueue makes for a Job (one pod set, the Job's annotations copied)."""
    meta = job_obj["metadata"]
    spec = job_obj["spec"]
    ann = dict(meta.get("annotations") or {})
    wl_meta: dict[str, Any] = {
        "name": name or f"job-{meta['name']}-abcde", "namespace": meta["namespace"],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                             "uid": uid, "controller": True}]}
    if ann.get(gating.GATED_BY):
        wl_meta["annotations"] = {gating.GATED_BY: ann[gating.GATED_BY]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": wl_meta,
            "spec": {"queueName": (meta.get("labels") or {}).get(gating.QUEUE_LABEL, "q"),
                     "podSets": [{"name": "main", "count": spec["parallelism"],
                                  "template": spec["template"]}]}}


def fit_policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "fitgate.io/v1alpha1", "kind": "FitPolicy",
            "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def cluster(nodes: int = 2, *, gpus: int = 8, roots: int = 2) -> list[dict[str, Any]]:
    """DeviceClasses and `nodes` GPU nodes (gpus over roots, a NIC per root), one rack."""
    out: list[dict[str, Any]] = [*gb.classes()]
    pool: dict[str, Any] = {"node.example.com/pool": "shared"}
    for i in range(nodes):
        out += gb.gpu_node(f"gpu-{i}", gpus=gpus, roots=roots, rack="rack-a", **pool)
    return out


def stores(*objects: Mapping[str, Any] | Iterable[Mapping[str, Any]]
           ) -> dict[kinds.Kind, store.Store]:
    """A store per kind fitgate watches, seeded with the objects (lists flattened)."""
    out = {k: store.Store(k) for k in kinds.ALL}
    for item in flatten(objects):
        out[kinds.BY_NAME[str(item["kind"])]].seed(dict(item))
    return out


def flatten(objects: Iterable[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for obj in objects:
        if isinstance(obj, Mapping):
            out.append(dict(obj))
        else:
            out.extend(flatten(obj))
    return out


def queued(*checks: str) -> list[dict[str, Any]]:
    """Namespace, LocalQueue q → ClusterQueue gpu using `checks`, and our AdmissionCheck."""
    return [namespace(), local_queue(), cluster_queue("gpu", *checks), admission_check()]


# ------------------------------------------------------------------------------ TLS


def tls_pair(directory: pathlib.Path, *, common_name: str = "fitgate-test",
             days: int = 1) -> tuple[pathlib.Path, pathlib.Path, bytes]:
    """A self-signed certificate for 127.0.0.1 and localhost: (cert file, key file, the
    certificate's PEM, which a client trusts as its CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file = directory / "tls.crt"
    key_file = directory / "tls.key"
    cert_file.write_bytes(pem)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file, pem


def review(obj: Mapping[str, Any] | None, *, operation: str = "CREATE", uid: str = "uid-1",
           group: str = "batch", version: str = "v1", kind: str = "Job",
           resource: str = "jobs", namespace: str = NS) -> dict[str, Any]:
    name = (obj or {}).get("metadata", {}).get("name", "")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": group, "version": version, "kind": kind},
                        "resource": {"group": group, "version": version,
                                     "resource": resource},
                        "name": name, "namespace": namespace, "operation": operation,
                        "userInfo": {"username": "alice"}, "object": obj}}
