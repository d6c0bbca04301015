"""The shipped examples are what the docs say they are: the GPU-cluster NodeShapes parse
and plan the jobs that need them, and `examples/verify/new-nodes.yaml` shows the
coordination misfit docs/fit.md walks through."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from admission.app import cli
from fitcore import workload

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CLUSTER = EXAMPLES / "gpu-cluster"


def _fit(capsys: pytest.CaptureFixture[str], job: str) -> dict:
    code = cli.main(["fit", "--inventory", str(CLUSTER / "inventory"), "--shapes",
                     str(CLUSTER / "nodeshapes"), "--workload", str(CLUSTER / "jobs" / job),
                     "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("path", sorted((CLUSTER / "nodeshapes").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_each_nodeshape_parses(path: pathlib.Path) -> None:
    shape = workload.node_shape(yaml.safe_load(path.read_text()), str(path))
    assert shape.name == path.stem
    assert shape.price > 0 and shape.max_nodes


def test_gpu_nodeshapes_publish_what_the_drivers_publish() -> None:
    h100 = workload.node_shape(yaml.safe_load(
        (CLUSTER / "nodeshapes" / "h100-sxm-8x.yaml").read_text()))
    gpus = [d for s in h100.slices if s.driver == "gpu.nvidia.com" for d in s.devices]
    nics = [d for s in h100.slices if s.driver == "dra.net" for d in s.devices]
    assert len(gpus) == 8 and len(nics) == 8
    roots = {str(d.attributes["resource.kubernetes.io/pcieRoot"]) for d in gpus + nics}
    assert len(roots) == 4  # two GPUs and two NICs behind each PCIe switch
    mig = workload.node_shape(yaml.safe_load(
        (CLUSTER / "nodeshapes" / "a100-mig.yaml").read_text()))
    counters = [cs for s in mig.slices for cs in s.shared_counters]
    assert len(counters) == 4
    assert all(not s.devices for s in mig.slices if s.shared_counters)  # separate slices


@pytest.mark.parametrize("job, shape, count", [
    ("train-h100.yaml", "h100-sxm-8x", 4),
    ("mig-notebooks.yaml", "a100-mig", 1),
    ("l4-batch-inference.yaml", "l4-inference", 3),
], ids=["rdma-training", "mig", "inference"])
def test_each_job_plans_on_the_shape_made_for_it(capsys: pytest.CaptureFixture[str],
                                                 job: str, shape: str, count: int) -> None:
    doc = _fit(capsys, job)
    assert doc["verdict"] == "needs-capacity"
    assert [(s["shape"], s["count"]) for s in doc["plan"]["shapes"]] == [(shape, count)]


def test_mig_notebooks_share_a_physical_gpu_per_pod(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    doc = _fit(capsys, "mig-notebooks.yaml")
    assert len(doc["placements"]) == 6
    for pod in doc["placements"]:
        devices = [d for claim in pod["devices"].values() for ds in claim.values()
                   for d in ds]
        assert len(devices) == 2
        parents = {d.split("/")[-1].split("-mig-")[0] for d in devices}
        assert len(parents) == 1, devices


def test_verify_example_reports_the_misplaced_nic(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["verify", "--before", str(EXAMPLES / "inventory"),
                     "--after", str(EXAMPLES / "inventory"),
                     "--after", str(EXAMPLES / "verify" / "new-nodes.yaml"),
                     "--shapes", str(EXAMPLES / "shapes"),
                     "--workload", str(EXAMPLES / "workload.yaml")])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "does not fit the new nodes (coordination)" in out
    assert ("node gke-rail-b (shape h100-rail): device nic.example.com/nic-1: attribute "
            "resource.kubernetes.io/pcieRoot is 'pci7', shape promised 'pci1'") in out
