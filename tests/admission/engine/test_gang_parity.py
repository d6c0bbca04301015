"""One gang reader: the same Job or Workload reads as one gang through every entry point.

The CLI (`fitgate fit`), the webhook, the gate and `explain` (`fitting.gang_of` over
stores), the webhook's decision process (`fitting.read_gang` with the named objects) and
the check (`gangs.gang_of`, with Kueue's assignment) all go through `fitcore.gang_of`,
which reads an object as the API server hands it over: a container's limits stand in for
missing requests, and a v1beta2 ResourceClaimTemplate is converted to v1.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
from typing import Any

import pytest

import fitcore
from admission.app import offline
from admission.engine import fitting, gangs
from admission.kube import kinds, store
from tests.admission import world as w
from tests.gang import builders as gb

LIMITS = {"cpu": "4", "memory": "8Gi"}


def _limits_only(pod_set: dict[str, Any]) -> dict[str, Any]:
    """A pod set whose container sets only limits, and a v1beta2 claim template."""
    out = copy.deepcopy(pod_set)
    out["template"]["spec"]["containers"] = [{"name": "main", "resources": {"limits": LIMITS}}]
    return out


def _template() -> dict[str, Any]:
    t = gb.template("gpus")
    t["apiVersion"] = "resource.k8s.io/v1beta2"
    return t


def _job() -> dict[str, Any]:
    ps = _limits_only(gb.pod_set("main", templates=("gpus",)))
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"parallelism": 2, "completions": 2, "template": ps["template"]}}


def _workload() -> dict[str, Any]:
    return w.admitted(_limits_only(gb.pod_set("workers", 2, templates=("gpus",))),
                      reserved=False)


def _stores(*objs: dict[str, Any]) -> dict[kinds.Kind, store.Store]:
    out = {k: store.Store(k) for k in (kinds.RESOURCE_CLAIM_TEMPLATE, kinds.RESOURCE_CLAIM,
                                       kinds.RESOURCE_FLAVOR)}
    for o in objs:
        kind = {"ResourceClaimTemplate": kinds.RESOURCE_CLAIM_TEMPLATE,
                "ResourceFlavor": kinds.RESOURCE_FLAVOR}[o["kind"]]
        out[kind].seed(o)
    return out


def _cli(tmp_path: pathlib.Path, obj: dict[str, Any]) -> fitcore.Gang:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        *gb.classes(), *gb.gpu_node("n1"), _template()]}))
    wl = tmp_path / "workload.json"
    wl.write_text(json.dumps(obj))
    g, _inv = offline.load_inventory([str(cluster)], [], str(wl))
    return g


def _entry_points(tmp_path: pathlib.Path, obj: dict[str, Any]) -> dict[str, fitcore.Gang]:
    stores = _stores(_template(), w.flavor())
    out = {
        "cli": _cli(tmp_path, obj),
        "webhook, gate and explain": fitting.gang_of(obj, stores),
        "webhook decision process": fitting.read_gang(obj, [_template()], []),
    }
    if obj["kind"] == "Workload":
        out["check"] = gangs.gang_of(obj, templates=stores[kinds.RESOURCE_CLAIM_TEMPLATE],
                                     flavors=stores[kinds.RESOURCE_FLAVOR],
                                     claims=stores[kinds.RESOURCE_CLAIM]).gang
    # Where the object came from is the CLI's to say; everything else must agree.
    return {k: dataclasses.replace(g, source=None) for k, g in out.items()}


@pytest.mark.parametrize("make", [_job, _workload], ids=["Job", "Workload"])
def test_every_entry_point_reads_one_gang(tmp_path: pathlib.Path, make: Any) -> None:
    gangs_ = _entry_points(tmp_path, make())
    cli_gang = gangs_["cli"]
    (ps,) = cli_gang.pod_sets
    # Limits stand in for the missing requests, as the API server defaults them.
    assert {k: str(v) for k, v in ps.requests.items()} == LIMITS
    assert ps.claims and ps.claims[0].name == "gpus"
    for where, g in gangs_.items():
        assert g == cli_gang, f"{where} reads another gang than the CLI"


def test_one_error_type_names_object_and_field(tmp_path: pathlib.Path) -> None:
    obj = _workload()
    obj["spec"]["podSets"][0]["template"]["spec"]["resourceClaims"][0][
        "resourceClaimTemplateName"] = "missing"
    stores = _stores(_template(), w.flavor())
    calls = [lambda: fitting.gang_of(obj, stores),
             lambda: fitting.read_gang(obj, [_template()], []),
             lambda: gangs.gang_of(obj, templates=stores[kinds.RESOURCE_CLAIM_TEMPLATE],
                                   flavors=stores[kinds.RESOURCE_FLAVOR])]
    for call in calls:
        with pytest.raises(fitcore.InputError) as exc:
            call()
        assert ("Workload default/train: spec.podSets[0].template.spec.resourceClaims[0]."
                "resourceClaimTemplateName: ResourceClaimTemplate default/missing not found"
                ) in str(exc.value)


def test_hostile_input_is_an_input_error_not_a_crash() -> None:
    obj = _job()
    obj["spec"]["template"]["spec"]["containers"] = [{"name": "main", "resources": {
        "limits": {"cpu": ["not", "a", "quantity"]}}}]
    with pytest.raises(fitcore.InputError):
        fitting.read_gang(obj, [], [])
    with pytest.raises(fitcore.InputError):
        fitcore.gang_of({"kind": "Deployment", "metadata": {"name": "x"}})
