"""Real-world-shaped manifests through `fitgate fit`: verdict, placement and message.

Each case is a directory of tests/gang/manifests written in the shapes those projects
publish (NVIDIA's DRA driver with MIG counters, Kueue's extended-resource sample Job, a
v1beta1 `kubectl get -o yaml` dump, KEP-4815's multi-host device, pods with required
anti-affinity, typos kubectl refuses, a directory with unrelated kinds).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from admission.app import cli

HERE = pathlib.Path(__file__).parent / "manifests"


@dataclasses.dataclass
class Case:
    id: str
    inventory: list[str]
    workload: str
    exit: int = 0
    verdict: str | None = None
    # podSet[index] -> node, for the placements expected
    nodes: list[str] | None = None
    # per placement, claim -> request -> device names (last path element)
    devices: list[dict[str, dict[str, list[str]]]] | None = None
    codes: list[str] | None = None  # reason codes, in order
    stderr: list[str] = dataclasses.field(default_factory=list)  # substrings
    stdout: list[str] = dataclasses.field(default_factory=list)
    args: list[str] = dataclasses.field(default_factory=list)
    check: Callable[[dict[str, Any]], None] | None = None


def _no_pod_on_db(doc: dict[str, Any]) -> None:
    assert "node-a" not in {p["node"] for p in doc["placements"]}


CASES = [
    Case("nvidia-mig-same-parent", ["nvidia-mig/inventory.yaml"], "nvidia-mig/workload.yaml",
         verdict="fits", nodes=["dgx-a"],
         devices=[{"mig": {"mig-small": ["gpu-0-mig-1g5gb-0"],
                           "mig-medium": ["gpu-0-mig-2g10gb-2"]}}],
         stdout=['"workload": "Job ml/mig-']),
    Case("nvidia-mig-v1beta2-template", ["nvidia-mig/inventory.yaml"],
         "nvidia-mig/workload-v1beta2.yaml", verdict="fits", nodes=["dgx-a"]),
    Case("gpu-by-limits-on-cpu-node", ["mixed-dir/inventory"], "mixed-dir/gpu-limits.yaml",
         verdict="unsatisfiable", codes=["no-host", "too-few-pods", "insufficient-resource"],
         stdout=['"resource": "nvidia.com/gpu"']),
    Case("extended-resource-job", ["extended-job/inventory.yaml"], "extended-job/workload.yaml",
         verdict="fits", nodes=["dra-node", "dra-node"],
         devices=[{"extended-resources": {"container-0-request-1": [
             "gpu-0", "gpu-1", "gpu-2", "gpu-3"]}},
                  {"extended-resources": {"container-0-request-1": [
                      "gpu-4", "gpu-5", "gpu-6", "gpu-7"]}}]),
    Case("v1beta1-slice-dump", ["v1beta1-dump/inventory.yaml"], "v1beta1-dump/workload.yaml",
         verdict="fits", nodes=["mi300-node"], devices=[{"gpus": {"gpus": ["gpu-0", "gpu-1"]}}]),
    Case("multi-host-shared-claim", ["multihost/inventory.yaml"], "multihost/workload.yaml",
         verdict="fits", nodes=["tpu-host-0", "tpu-host-1"],
         devices=[{"tpu": {"tpu": ["tpu-2x4"]}}, {"tpu": {"tpu": ["tpu-2x4"]}}]),
    Case("multi-host-claim-already-allocated", ["multihost/inventory.yaml"],
         "multihost-allocated/workload.yaml", verdict="fits",
         nodes=["tpu-host-0", "tpu-host-1"]),
    Case("anti-affinity-spreads-and-avoids-db",
         ["anti-affinity/inventory.yaml", "anti-affinity/more.yaml"],
         "anti-affinity/workload.yaml", verdict="fits", nodes=["node-b", "node-c"],
         check=_no_pod_on_db),
    Case("anti-affinity-one-node-short", ["anti-affinity/inventory.yaml"],
         "anti-affinity/workload.yaml", verdict="unsatisfiable",
         codes=["shape-limits", "too-few-pods", "pod-affinity"],
         stdout=["1 node does not satisfy its required pod affinity or anti-affinity"]),
    Case("device-taint-rules-not-applied-in-1.36",
         ["extended-job/inventory.yaml", "taint-rules/rules.yaml"], "extended-job/workload.yaml",
         verdict="fits", nodes=["dra-node", "dra-node"],
         stderr=["DeviceTaintRule gpu-maintenance, no-selector not applied: "
                 "DRADeviceTaintRules is off by default in Kubernetes 1.36"]),
    Case("device-taint-rules-applied-in-1.37",
         ["extended-job/inventory.yaml", "taint-rules/rules.yaml"], "extended-job/workload.yaml",
         args=["--kube-version", "1.37"], verdict="unsatisfiable",
         stdout=["tainted and not tolerated"]),
    Case("taint-rule-without-selector-matches-nothing-in-1.37",
         ["extended-job/inventory.yaml", "taint-rules/no-selector.yaml"],
         "extended-job/workload.yaml", args=["--kube-version", "1.37"], verdict="fits"),
    Case("misspelled-fields", ["extended-job/inventory.yaml"], "misspelled/workload.yaml",
         exit=2, stderr=[
             "ResourceClaimTemplate default/two-gpus: spec.spec.devices.requests[0].exactly."
             "counts: unknown field 'counts'",
             "Job default/typos: spec.template.spec.nodeselector: unknown field "
             "'nodeselector'",
             "spec.template.spec.containers[0].resources.resourceclaims: unknown field "
             "'resourceclaims'"]),
    Case("misspelled-fields-lenient", ["extended-job/inventory.yaml"],
         "misspelled/workload.yaml", args=["--lenient"], verdict="fits",
         stderr=["unknown field 'counts' (ignored: --lenient)"]),
    Case("directory-with-other-kinds", ["mixed-dir/inventory"], "mixed-dir/workload.yaml",
         verdict="unsatisfiable", codes=["shape-limits", "too-few-pods",
                                         "insufficient-resource"],
         stderr=["skipped 3 objects of kinds fitgate does not read: apps/v1 Deployment (1), "
                 "kustomize.config.k8s.io/v1beta1 Kustomization (1), v1 ConfigMap (1)"],
         stdout=["holds 1 of its pods, then not enough cpu", '"node": "worker-']),
]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_manifest(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", *(a for p in case.inventory for a in ("--inventory", str(HERE / p))),
            "--workload", str(HERE / case.workload), "-o", "json", *case.args]
    code, out, err = run(capsys, *argv)
    assert code == case.exit, err
    for text in case.stderr:
        assert text in err, err
    for text in case.stdout:
        assert text in out, out
    if case.exit:
        assert out == "" and "Traceback" not in err
        return
    doc = json.loads(out)
    assert doc["verdict"] == case.verdict, doc["reasons"]
    if case.nodes is not None:
        assert [p["node"] for p in doc["placements"]] == case.nodes
    if case.devices is not None:
        got = [{claim: {req: [d.rsplit("/", 1)[-1] for d in ids] for req, ids in reqs.items()}
                for claim, reqs in p["devices"].items()} for p in doc["placements"]]
        assert got == case.devices
    if case.codes is not None:
        assert [d["code"] for d in doc["details"]] == case.codes, doc["details"]
    if case.check is not None:
        case.check(doc)


def test_deep_document_is_refused_without_traceback(tmp_path: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  labels: " + "[" * 500 + "]" * 500)
    code, out, err = run(capsys, "fit", "--inventory", str(deep), "--workload",
                         str(HERE / "mixed-dir/workload.yaml"))
    assert code == 2 and out == ""
    assert "nested more than 100 levels deep" in err and "Traceback" not in err


def test_empty_inventory_is_bad_input(tmp_path: pathlib.Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "classes.yaml").write_text((HERE / "extended-job/inventory.yaml").read_text()
                                           .split("---\n")[2])
    code, _, err = run(capsys, "fit", "--inventory", str(tmp_path / "classes.yaml"),
                       "--workload", str(HERE / "mixed-dir/workload.yaml"))
    assert code == 2
    assert "holds no Node, and there are no NodeShapes" in err


def test_kind_in_a_version_not_served(tmp_path: pathlib.Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "old.yaml"
    f.write_text("apiVersion: resource.k8s.io/v1alpha3\nkind: ResourceSlice\nmetadata: "
                 "{name: s}\nspec: {}\n")
    code, _, err = run(capsys, "fit", "--inventory", str(f), "--workload",
                       str(HERE / "mixed-dir/workload.yaml"))
    assert code == 2
    assert ("ResourceSlice is read in resource.k8s.io/v1, resource.k8s.io/v1beta2, "
            "resource.k8s.io/v1beta1, not resource.k8s.io/v1alpha3") in err
