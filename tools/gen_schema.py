"""Generate fitcore/schema.json: the fields of every kind fitgate reads, for strict
field validation (`fitcore.schema`).

Sources (no network once they are installed):
- Kubernetes kinds (core/v1, batch/v1, resource.k8s.io v1, v1beta1, v1beta2): the
  OpenAPI models kubernetes-asyncio generates from the Kubernetes OpenAPI document
  (`openapi_types` and `attribute_map` of each model class). fitcore may not import
  kubernetes_asyncio (import-linter), so this script turns them into data at dev time.
- Kueue's Workload: the CRD's openAPIV3Schema in the Kueue module
  (`go mod download -json sigs.k8s.io/kueue@$KUEUE_VERSION` finds it). The embedded pod
  template refers to the core PodSpec model.
- fitgate's own NodeShape (fitgate.io/v1alpha1): declared below, next to what reads it.

`knownKinds` lists every kind of those sources, so that unrelated objects in an input
directory are skipped while a misspelled kind is an error. Only models reachable from the
kinds are kept.

Run `make schema` (`.venv/bin/python tools/gen_schema.py`, with GOMODCACHE pointing at a
module cache that holds Kueue, or with access to the Go proxy) after upgrading
kubernetes-asyncio or Kueue. The output is deterministic; tests/fitcore/test_schema.py
checks it against the installed kubernetes-asyncio.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import kubernetes_asyncio
import yaml
from kubernetes_asyncio.client import models

KUEUE_VERSION = os.environ.get("KUEUE_VERSION", "v0.19.2")
OUT = pathlib.Path(__file__).resolve().parent.parent / "fitcore" / "schema.json"

#: (apiVersion, kind) -> kubernetes-asyncio model class.
KINDS = {
    ("v1", "Node"): "V1Node",
    ("v1", "Pod"): "V1Pod",
    ("batch/v1", "Job"): "V1Job",
    ("resource.k8s.io/v1", "ResourceSlice"): "V1ResourceSlice",
    ("resource.k8s.io/v1", "DeviceClass"): "V1DeviceClass",
    ("resource.k8s.io/v1", "ResourceClaim"): "ResourceV1ResourceClaim",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "V1ResourceClaimTemplate",
    ("resource.k8s.io/v1beta1", "ResourceSlice"): "V1beta1ResourceSlice",
    ("resource.k8s.io/v1beta1", "DeviceClass"): "V1beta1DeviceClass",
    ("resource.k8s.io/v1beta1", "ResourceClaim"): "V1beta1ResourceClaim",
    ("resource.k8s.io/v1beta1", "ResourceClaimTemplate"): "V1beta1ResourceClaimTemplate",
    ("resource.k8s.io/v1beta2", "ResourceSlice"): "V1beta2ResourceSlice",
    ("resource.k8s.io/v1beta2", "DeviceClass"): "V1beta2DeviceClass",
    ("resource.k8s.io/v1beta2", "ResourceClaim"): "V1beta2ResourceClaim",
    ("resource.k8s.io/v1beta2", "ResourceClaimTemplate"): "V1beta2ResourceClaimTemplate",
    ("resource.k8s.io/v1beta2", "DeviceTaintRule"): "V1beta2DeviceTaintRule",
    ("resource.k8s.io/v1alpha3", "DeviceTaintRule"): "V1alpha3DeviceTaintRule",
}

#: fitgate.io/v1alpha1 NodeShape, in the same notation.
NODE_SHAPE = {
    "FitgateV1alpha1NodeShape": {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                                 "spec": "FitgateV1alpha1NodeShapeSpec", "status": "object"},
    "FitgateV1alpha1NodeShapeSpec": {
        "nodeLabels": "dict(str, str)", "allocatable": "dict(str, str)",
        "taints": "list[V1Taint]", "resourceSlices": "list[V1ResourceSliceSpec]",
        "price": "object", "topology": "FitgateV1alpha1NodeShapeTopology",
        "provisioning": "FitgateV1alpha1NodeShapeProvisioning", "maxNodes": "int"},
    "FitgateV1alpha1NodeShapeTopology": {"domainLabel": "str", "nodesPerDomain": "int"},
    "FitgateV1alpha1NodeShapeProvisioning": {
        "className": "str", "parameters": "dict(str, str)",
        "karpenter": "FitgateV1alpha1NodeShapeProvisioningKarpenter"},
    "FitgateV1alpha1NodeShapeProvisioningKarpenter": {
        "nodePool": "str", "requirements": "list[V1NodeSelectorRequirement]"},
}

_PRIMITIVES = {"str", "int", "bool", "float", "object", "datetime", "date"}


def _model_fields(name: str) -> dict[str, str]:
    cls = getattr(models, name)
    return {cls.attribute_map[attr]: typ for attr, typ in sorted(cls.openapi_types.items())}


def _refs(typ: str) -> list[str]:
    return [t for t in re.findall(r"[A-Za-z0-9_]+", typ)
            if t not in _PRIMITIVES and t not in ("list", "dict")]


def _crd_models(prefix: str, schema: dict[str, Any], out: dict[str, dict[str, str]]) -> str:
    """A CRD openAPIV3Schema node as a type string, adding object models to `out`."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return "object"
    kind = schema.get("type")
    if kind == "array":
        return f"list[{_crd_models(prefix + 'Item', schema.get('items', {}), out)}]"
    if kind == "object" or "properties" in schema:
        props = schema.get("properties")
        if props is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return f"dict(str, {_crd_models(prefix + 'Value', extra, out)})"
            return "object"
        if "containers" in props and "initContainers" in props:
            return "V1PodSpec"
        fields = {}
        for key in sorted(props):
            sub = prefix + key[:1].upper() + key[1:]
            fields[key] = _crd_models(sub, props[key], out)
        out[prefix] = fields
        return prefix
    if kind == "integer":
        return "int"
    if kind == "boolean":
        return "bool"
    if kind == "number":
        return "float"
    if schema.get("x-kubernetes-int-or-string") or schema.get("anyOf"):
        return "object"
    return "str"


def _kueue_bases() -> pathlib.Path:
    found = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{KUEUE_VERSION}"],
                           check=True, capture_output=True, text=True)
    return pathlib.Path(json.loads(found.stdout)["Dir"]) / "config/components/crd/bases"


def _known_kinds(bases: pathlib.Path) -> list[str]:
    """Kinds of Kubernetes and Kueue objects: in an input directory they are unrelated
    objects to skip, not misspelled kinds."""
    kinds = set()
    for name in dir(models):
        cls = getattr(models, name)
        amap = getattr(cls, "attribute_map", None)
        if not isinstance(amap, dict) or not {"kind", "metadata"} <= set(amap.values()):
            continue
        m = re.match(r"^(?:[A-Z][a-z]+)*V[0-9]+(?:alpha[0-9]+|beta[0-9]+)?(.+)$", name)
        if m and not m.group(1).endswith("List"):
            kinds.add(m.group(1))
    for crd in sorted(bases.glob("*.yaml")):
        kinds.add(yaml.safe_load(crd.read_text())["spec"]["names"]["kind"])
    return sorted(kinds)


def _kueue_workload(bases: pathlib.Path, out: dict[str, dict[str, str]]) -> str:
    crd = yaml.safe_load((bases / "kueue.x-k8s.io_workloads.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    schema = version["schema"]["openAPIV3Schema"]
    name = _crd_models("KueueV1beta2Workload", schema, out)
    out[name]["metadata"] = "V1ObjectMeta"
    return name


# Fields Kubernetes v1.37 serves that the installed kubernetes-asyncio's models lack. The
# v1.37 kubelet sets status.nodeInfo.runningInUserNamespace on every Node it registers
# (k8s.io/api v0.37.2 core/v1 NodeSystemInfo), so without it every real node would be
# refused by the strict reader (found on the offline kind cluster, e2e/tests/test_kind.py).
NEWER_THAN_CLIENT: dict[str, dict[str, str]] = {
    "V1NodeSystemInfo": {"runningInUserNamespace": "bool"},
}


def main() -> int:
    kinds: dict[str, str] = {f"{v}/{k}": m for (v, k), m in KINDS.items()}
    out: dict[str, dict[str, str]] = {}
    todo = list(KINDS.values())
    extra: dict[str, dict[str, str]] = dict(NODE_SHAPE)
    kinds["fitgate.io/v1alpha1/NodeShape"] = "FitgateV1alpha1NodeShape"
    bases = _kueue_bases()
    kinds["kueue.x-k8s.io/v1beta2/Workload"] = _kueue_workload(bases, extra)
    for fields in extra.values():
        for typ in fields.values():
            todo.extend(r for r in _refs(typ) if r not in extra)
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fields = {**_model_fields(name), **NEWER_THAN_CLIENT.get(name, {})}
        out[name] = fields
        for typ in fields.values():
            todo.extend(_refs(typ))
    out.update(extra)
    doc = {"generatedBy": "tools/gen_schema.py",
           "kubernetesAsyncio": kubernetes_asyncio.__version__,
           "kueue": KUEUE_VERSION,
           "kinds": dict(sorted(kinds.items())),
           "knownKinds": _known_kinds(bases),
           "models": {k: out[k] for k in sorted(out)}}
    OUT.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"{OUT}: {len(kinds)} kinds, {len(out)} models, {OUT.stat().st_size} bytes",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    importlib.import_module("kubernetes_asyncio.client.models")
    sys.exit(main())
