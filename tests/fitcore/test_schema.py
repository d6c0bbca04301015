"""fitcore/schema.json is what tools/gen_schema.py makes of the installed
kubernetes-asyncio, and strict validation names unknown fields by path."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from fitcore import read, schema

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_schema", ROOT / "tools/gen_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kubernetes_models_match_the_installed_client() -> None:
    gen = _generator()
    data = schema._data()
    for (api_version, kind), model in gen.KINDS.items():
        assert data["kinds"][f"{api_version}/{kind}"] == model
    for name, fields in data["models"].items():
        if name.startswith(("Kueue", "Fitgate")):
            continue
        newer = gen.NEWER_THAN_CLIENT.get(name, {})
        assert {**gen._model_fields(name), **newer} == fields, name


def test_a_v1_37_kubelets_node_is_read() -> None:
    # The v1.37 kubelet reports status.nodeInfo.runningInUserNamespace; the installed
    # client's models lack it (gen_schema.NEWER_THAN_CLIENT adds it). Refused before.
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "status": {"nodeInfo": {"kubeletVersion": "v1.37.2",
                                    "runningInUserNamespace": False}}}
    assert schema.unknown_fields(node, "V1Node") == []


@pytest.mark.parametrize(("obj", "unknown"), [
    ({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "lables": {}}},
     ["metadata.lables"]),
    ({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
      "spec": {"devices": [{"name": "d", "basic": {}}]}}, ["spec.devices[0].basic"]),
    ({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
      "metadata": {"name": "s"}, "spec": {"devices": [{"name": "d", "basic": {
          "atributes": {}}}]}}, ["spec.devices[0].basic.atributes"]),
    ({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"},
      "spec": {"podSets": [{"name": "m", "count": 1, "template": {"spec": {
          "containers": [{"name": "c", "resources": {"limts": {}}}]}}}]}},
     ["spec.podSets[0].template.spec.containers[0].resources.limts"]),
    ({"apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape", "metadata": {"name": "s"},
      "spec": {"resourceSlices": [{"driver": "d", "devices": [{"name": "x", "capacty": {}}]}],
               "prize": 3}}, ["spec.prize", "spec.resourceSlices[0].devices[0].capacty"]),
    ({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
      "spec": {"devices": [
          {"name": "d", "attributes": {"a": {"int": 1}, "x/b": {"strng": "v"}}},
          {"name": "e", "capacity": {"m": {"value": "1", "vaule": "2"}},
           "taints": [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "efect": "x"}]}]}},
     ["spec.devices[0].attributes['x/b'].strng", "spec.devices[1].capacity['m'].vaule",
      "spec.devices[1].taints[1].efect"]),
], ids=["node", "v1-slice-with-basic", "v1beta1-basic", "workload-template", "node-shape",
        "objects-of-leaves"])
def test_unknown_fields_by_path(obj: dict, unknown: list[str], reader: str) -> None:
    model = schema.model_for(obj["apiVersion"], obj["kind"])
    assert model is not None
    assert schema.unknown_fields(obj, model) == unknown


def test_v1beta1_conversion_and_defaults() -> None:
    sl = read.normalize({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
                         "metadata": {"name": "s"}, "spec": {"devices": [
                             {"name": "d", "basic": {"attributes": {"a": {"int": 1}}}}]}})
    assert sl["apiVersion"] == "resource.k8s.io/v1"
    assert sl["spec"]["devices"] == [{"name": "d", "attributes": {"a": {"int": 1}}}]
    claim = read.normalize({"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
                            "metadata": {"name": "c"}, "spec": {"devices": {"requests": [
                                {"name": "r", "deviceClassName": "gpu", "count": 2},
                                {"name": "f", "firstAvailable": [{"name": "s",
                                                                  "deviceClassName": "g"}]}]}}})
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}},
        {"name": "f", "firstAvailable": [{"name": "s", "deviceClassName": "g"}]}]
    pod = read.normalize({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-"},
                          "spec": {"containers": [{"name": "c", "resources": {
                              "limits": {"cpu": "2"}, "requests": {"memory": "1Gi"}}}]}})
    assert pod["metadata"]["name"].startswith("p-") and len(pod["metadata"]["name"]) == 7
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"memory": "1Gi",
                                                                     "cpu": "2"}
    node = read.normalize({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                           "status": {"capacity": {"cpu": "8"}}})
    assert node["status"]["allocatable"] == {"cpu": "8"}
