"""`fitgate fit` and `fitgate version`: output formats and bad input (exit 2)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import yaml

from admission.app import cli
from tests.gang import builders as gb

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def write(path: pathlib.Path, *objects: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--inventory", str(EXAMPLES / "inventory"),
                       "--shapes", str(EXAMPLES / "shapes"), "--workload",
                       str(EXAMPLES / "workload.yaml"), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["verdict"] == "needs-capacity"
    assert doc["category"] == "capacity"
    assert doc["plan"]["shapes"] == [{"shape": "h100-rail", "count": 3,
                                      "domain": "h100-rail-new-domain-0"}]
    assert doc["plan"]["price"] == "36"
    assert [r["shape"] for r in doc["rejectedShapes"]] == ["h100-basic"]
    assert len(doc["placements"]) == 6
    first = doc["placements"][0]
    assert first["podSet"] == "workers" and first["index"] == 0
    assert first["devices"]["gpus"]["nic"] == ["nic.example.com/nic-h100-rail-new-0/nic-0"]
    assert set(doc["stats"]) == {"seconds", "nodes", "devices", "steps"}
    assert doc["workload"] == "Workload team-b/train-llm"
    assert doc["podSets"] == [{"name": "workers", "count": 6, "minCount": None, "placed": 6,
                               "topology": "topology.example.com/rack",
                               "domain": "h100-rail-new-domain-0"}]
    assert doc["stats"]["nodes"] == 3
    # Structured reasons: one per sentence, with code, category, object and field.
    assert [d["message"] for d in doc["details"]] == doc["reasons"]
    assert [d["code"] for d in doc["details"]] == [
        "topology-domain-too-small", "insufficient-devices", "insufficient-resource",
        "insufficient-resource"]
    lead = doc["details"][0]
    assert lead["category"] == "capacity" and lead["podSet"] == "workers"
    assert lead["object"] == "Workload team-b/train-llm"
    assert lead["field"] == "spec.podSets[0].template.spec"
    cpu = doc["details"][2]
    assert (cpu["node"], cpu["resource"], cpu["held"]) == ("gpu-a2", "cpu", 2)
    assert cpu["field"] == "spec.podSets[0].template.spec.containers[*].resources.requests"
    assert doc["rejectedShapes"][0]["code"] == "shape-does-not-fit"
    assert doc["rejectedShapes"][0]["category"] == "configuration"


def test_example_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", "--inventory", str(EXAMPLES / "inventory"),
                       "--shapes", str(EXAMPLES / "shapes"), "--workload",
                       str(EXAMPLES / "workload.yaml"))
    assert code == 0
    assert out.startswith("Workload team-b/train-llm: needs new nodes\n")
    assert "plan: 3 × h100-rail in new domain h100-rail-new-domain-0  (price 36)" in out
    assert "not h100-basic:" in out


def test_fits_json(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write(tmp_path / "inv.yaml", *gb.classes(), *gb.gpu_node("n1"))
    wl = write(tmp_path / "wl.yaml", gb.template(),
               gb.workload(gb.pod_set(count=2, templates=("gpus",))))
    code, out, _ = run(capsys, "fit", "--inventory", inv, "--workload", wl, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["verdict"] == "fits" and doc["plan"] is None
    assert [p["node"] for p in doc["placements"]] == ["n1", "n1"]


BAD = [
    ("bad-quantity", lambda: [*gb.classes(), gb.node("n1", cpu="lots")],
     ["inv.yaml", "Node n1", "status.allocatable['cpu']"]),
    ("bad-slice-field", lambda: [*gb.classes(), {**gb.gpu_node("n1")[1], "spec": {
        **gb.gpu_node("n1")[1]["spec"], "driver": "Not_A_Driver"}}],
     ["inv.yaml", "ResourceSlice n1-gpu", "spec.driver"]),
    ("unknown-kind", lambda: [{"apiVersion": "v1", "kind": "Sevrice",
                               "metadata": {"name": "x"}}],
     ["inv.yaml", "Sevrice x", "unknown kind 'Sevrice' in v1"]),
]


@pytest.mark.parametrize(("objects", "expect"), [(o, e) for _, o, e in BAD],
                         ids=[i for i, _, _ in BAD])
def test_bad_inventory_exit_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                              objects: Any, expect: list[str]) -> None:
    inv = write(tmp_path / "inv.yaml", *objects())
    wl = write(tmp_path / "wl.yaml", gb.workload(gb.pod_set(count=1)))
    code, out, err = run(capsys, "fit", "--inventory", inv, "--workload", wl)
    assert code == 2 and out == ""
    for text in expect:
        assert text in err


WORKLOAD_BAD = [
    ("missing-template", gb.workload(gb.pod_set(templates=("nope",))),
     "Workload default/train: spec.podSets[0].template.spec.resourceClaims[0]."
     "resourceClaimTemplateName: ResourceClaimTemplate default/nope not found"),
    ("bad-count", {**gb.workload(gb.pod_set()), "spec": {"podSets": [
        {**gb.pod_set(), "count": "four"}]}},
     "Workload default/train: spec.podSets[0].count: must be an integer, got str"),
    ("min-count-above-count", gb.workload(gb.pod_set(count=2, min_count=3)),
     "spec.podSets[0].minCount: must be between 1 and count (2), got 3"),
    ("bad-request", gb.workload(gb.pod_set(cpu="two")),
     "spec.podSets[0].template.spec.containers[0].resources.requests['cpu']: invalid "
     "quantity"),
]


@pytest.mark.parametrize(("workload", "message"), [(w, m) for _, w, m in WORKLOAD_BAD],
                         ids=[i for i, _, _ in WORKLOAD_BAD])
def test_bad_workload_exit_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                             workload: dict[str, Any], message: str) -> None:
    inv = write(tmp_path / "inv.yaml", *gb.classes(), *gb.gpu_node("n1"))
    wl = write(tmp_path / "wl.yaml", workload)
    code, _, err = run(capsys, "fit", "--inventory", inv, "--workload", wl)
    assert code == 2
    assert f"{wl}: " in err and message in err, err


def test_bad_shape_names_shape_field(tmp_path: pathlib.Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    shape = gb.shape("rail")
    shape["spec"]["resourceSlices"][0]["devices"][0]["name"] = "GPU_0"
    inv = write(tmp_path / "inv.yaml", *gb.classes())
    shapes = write(tmp_path / "shapes.yaml", shape)
    wl = write(tmp_path / "wl.yaml", gb.workload(gb.pod_set()))
    code, _, err = run(capsys, "fit", "--inventory", inv, "--shapes", shapes, "--workload", wl)
    assert code == 2
    assert "NodeShape rail: spec.resourceSlices[0].devices[0].name" in err


@pytest.mark.parametrize(("content", "message"), [
    ("kind: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "not a Kubernetes object"),
    ("kind: Node\nmetadata:\n  name: [a\n  b: 1\n", "line 4, column"),
    ("kind: Node\nkind: Pod\n", "refused: line 2: duplicate key 'kind'"),
    ("kind: Node\nmetadata: {~: 1}\n", "refused: line 2: a mapping key must be a string"),
    ('{"kind": "Node", "kind": "Pod"}', "refused: duplicate key 'kind'"),
], ids=["broken-yaml", "not-an-object", "broken-yaml-position", "duplicate-key",
        "null-key", "json-duplicate-key"])
def test_unreadable_file_exit_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                content: str, message: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(content)
    wl = write(tmp_path / "wl.yaml", gb.workload(gb.pod_set()))
    code, _, err = run(capsys, "fit", "--inventory", str(inv), "--workload", wl)
    assert code == 2 and str(inv) in err and message in err


def test_missing_path_and_two_workloads(tmp_path: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    wl = write(tmp_path / "wl.yaml", gb.workload(gb.pod_set()),
               gb.workload(gb.pod_set(), name="other"))
    code, _, err = run(capsys, "fit", "--inventory", str(tmp_path / "nope"), "--workload", wl)
    assert code == 2 and "no such file or directory" in err
    inv = write(tmp_path / "inv.yaml", *gb.classes())
    code, _, err = run(capsys, "fit", "--inventory", inv, "--workload", wl)
    assert code == 2 and "must hold exactly one Workload or Job" in err


def test_job_is_a_gang(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write(tmp_path / "inv.yaml", *gb.classes(), *gb.gpu_node("n1"), *gb.gpu_node("n2"))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 3, "completions": 10,
                    "template": gb.pod_set(templates=("gpus",))["template"]}}
    wl = write(tmp_path / "wl.yaml", gb.template(), job)
    code, out, _ = run(capsys, "fit", "--inventory", inv, "--workload", wl, "-o", "json")
    assert code == 0
    assert [p["podSet"] for p in json.loads(out)["placements"]] == ["main"] * 3


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "version")
    assert code == 0 and out.startswith("fitgate ")


def test_workloads_in_the_inventory_are_not_the_gang(tmp_path: pathlib.Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    other = gb.workload(gb.pod_set(templates=("not-here",)), name="someone-else")
    inv = write(tmp_path / "inv.yaml", *gb.classes(), *gb.gpu_node("n1"), other)
    wl = write(tmp_path / "wl.yaml", gb.template(),
               gb.workload(gb.pod_set(count=1, templates=("gpus",))))
    code, out, err = run(capsys, "fit", "--inventory", inv, "--workload", wl, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["verdict"] == "fits"


def test_min_count_partial_in_text(tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    inv = write(tmp_path / "inv.yaml", *gb.classes(), *gb.gpu_node("n1"))
    wl = write(tmp_path / "wl.yaml", gb.template(),
               gb.workload(gb.pod_set(count=4, min_count=2, templates=("gpus",))))
    code, out, _ = run(capsys, "fit", "--inventory", inv, "--workload", wl)
    assert code == 0
    assert "fits on existing nodes" in out and "pod set workers: 2 of 4 pods" in out


def _after(tmp_path: pathlib.Path, edit: Any = None, names: tuple[str, ...] = (
        "gke-rail-a", "gke-rail-b", "gke-rail-c")) -> str:
    from tests.gang.test_plan import provisioned

    shape = yaml.safe_load((EXAMPLES / "shapes" / "h100-rail.yaml").read_text())
    return write(tmp_path / "new-nodes.yaml",
                 *provisioned(shape, list(names), rack="rack-c", edit=edit))


@pytest.mark.parametrize(("edit", "names", "verdict", "mismatch"), [
    (None, ("gke-rail-a", "gke-rail-b", "gke-rail-c"), "fits", None),
    ("nic-root", ("gke-rail-a", "gke-rail-b", "gke-rail-c"), "misfit",
     "node gke-rail-b (shape h100-rail): device nic.example.com/nic-1: attribute "
     "resource.kubernetes.io/pcieRoot is 'pci7', shape promised 'pci1'"),
    (None, ("gke-rail-a", "gke-rail-b"), "misfit",
     "shape h100-rail: planned 3 new nodes, found 2"),
], ids=["promise-kept", "nic-on-another-root", "a-node-missing"])
def test_verify_example(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], edit: Any,
                        names: tuple[str, ...], verdict: str, mismatch: str | None) -> None:
    from tests.gang.test_plan import wrong_nic_root

    after = _after(tmp_path, wrong_nic_root if edit else None, names)
    code, out, err = run(capsys, "verify", "--before", str(EXAMPLES / "inventory"),
                         "--after", str(EXAMPLES / "inventory"), "--after", after,
                         "--shapes", str(EXAMPLES / "shapes"),
                         "--workload", str(EXAMPLES / "workload.yaml"), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == verdict, doc
    assert doc["planVerdict"] == "needs-capacity"
    if mismatch is None:
        assert doc["mismatches"] == []
        assert {p["node"] for p in doc["placements"]} == set(names)
    else:
        assert doc["category"] == "coordination"
        assert mismatch in doc["mismatches"]


def test_verify_text_nothing_to_verify(tmp_path: pathlib.Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    inv = write(tmp_path / "inv.yaml", *gb.classes(), *gb.gpu_node("n1"))
    wl = write(tmp_path / "wl.yaml", gb.template(),
               gb.workload(gb.pod_set(count=1, templates=("gpus",))))
    code, out, _ = run(capsys, "verify", "--before", inv, "--after", inv, "--workload", wl)
    assert code == 0
    assert out.strip() == "Workload default/train: nothing to verify: it fits existing nodes"
