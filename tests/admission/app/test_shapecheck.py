"""`fitgate shape check FILE...`: exit 0 for good shapes (the examples), 1 with a finding
per problem naming file, shape and field (the CRD's schema and CEL rules, fitcore's
refusal, duplicate devices across slices of a pool, per-node attributes), 2 for a file
that cannot be read or is not YAML."""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from admission.app import cli, shapecheck

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples" / "shapes"

GOOD: dict[str, Any] = {
    "apiVersion": "fitgate.io/v1alpha1", "kind": "NodeShape", "metadata": {"name": "good"},
    "spec": {
        "nodeLabels": {"pool": "gpu"},
        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": 110},
        "resourceSlices": [{
            "driver": "gpu.example.com", "pool": {"name": "gpus"},
            "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}},
                         "capacity": {"memory": {"value": "80Gi"}}},
                        {"name": "gpu-1", "capacity": {"memory": {"value": "80Gi"}}}]}],
        "price": "12.5",
    },
}


def edit(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    shape = copy.deepcopy(GOOD)
    change(shape["spec"])
    return shape


def second_slice(spec: dict[str, Any]) -> None:
    spec["resourceSlices"].append(copy.deepcopy(spec["resourceSlices"][0]))
    spec["resourceSlices"][1]["devices"] = [{"name": "gpu-1"}]


def first_device(spec: dict[str, Any]) -> dict[str, Any]:
    device: dict[str, Any] = spec["resourceSlices"][0]["devices"][0]
    return device


# (what is wrong, the shape, the field the finding names, a word of its message)
BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("negative allocatable", edit(lambda s: s["allocatable"].update(cpu="-4")),
     "spec.allocatable[cpu]", "pattern"),
    ("unknown field", edit(lambda s: first_device(s).update(colour="red")),
     "spec.resourceSlices[0].devices[0].colour", "unknown field"),
    ("bad taint effect", edit(lambda s: s.update(taints=[{"key": "a", "effect": "Sometimes"}])),
     "spec.taints[0].effect", "NoSchedule"),
    ("a slice that selects nodes (CEL rule)",
     edit(lambda s: s["resourceSlices"][0].update(nodeName="node-1")),
     "spec.resourceSlices[0]", "must not select nodes"),
    ("negative price (CEL rule)", edit(lambda s: s.update(price=-3)), "spec.price",
     "negative"),
    ("both provisioners (CEL rule)",
     edit(lambda s: s.update(provisioning={"className": "x", "karpenter": {"nodePool": "p"}})),
     "spec.provisioning", "exclusive"),
    ("duplicate device in one slice",
     edit(lambda s: first_device(s).update(name="gpu-1")),
     "spec.resourceSlices[0].devices[1]", "duplicate"),
    ("duplicate device across slices of a pool", edit(second_slice),
     "spec.resourceSlices[1].devices[0].name", "also spec.resourceSlices[0].devices[1]"),
    ("per-node UUID",
     edit(lambda s: first_device(s)["attributes"].update(
         uuid={"string": "GPU-0b0f3e2a-1c4d-4e5f-8a9b-0c1d2e3f4a5b"})),
     "spec.resourceSlices[0].devices[0].attributes[uuid]", "UUID"),
    ("what fitgate refuses: a malformed capacity",
     edit(lambda s: first_device(s)["capacity"]["memory"].update(value="lots")),
     "spec.resourceSlices[0].devices[0].capacity[memory].value", "pattern"),
]


def check(tmp_path: pathlib.Path, docs: list[Any], capsys: pytest.CaptureFixture[str]
          ) -> tuple[int, str, str]:
    path = tmp_path / "shapes.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code = cli.main(["shape", "check", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_example_shapes_are_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["shape", "check", str(EXAMPLES)]) == 0
    assert capsys.readouterr().out == ""


def test_a_good_shape_is_clean(tmp_path: pathlib.Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert check(tmp_path, [GOOD], capsys) == (0, "", "")


@pytest.mark.parametrize(("what", "shape", "field", "word"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_shape_is_a_finding_naming_the_field(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], what: str,
        shape: dict[str, Any], field: str, word: str) -> None:
    code, out, _ = check(tmp_path, [shape], capsys)
    assert code == 1, what
    lines = [line for line in out.splitlines() if f"NodeShape good: {field}:" in line]
    assert lines, out
    assert any(word in line for line in lines), out


def test_fitcores_refusal_is_reported_with_its_field() -> None:
    bad = edit(lambda s: s.update(topology={"nodesPerDomain": 0}))
    found = shapecheck.check_shape(bad, "f.yaml")
    assert any(f.field == "spec.topology.nodesPerDomain" and "fitgate refuses" in f.message
               for f in found), found


def test_an_object_of_another_kind_is_a_finding(tmp_path: pathlib.Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = check(tmp_path, [GOOD, {"apiVersion": "v1", "kind": "ConfigMap",
                                           "metadata": {"name": "x"}}], capsys)
    assert code == 1
    assert "not a NodeShape (ConfigMap)" in out


@pytest.mark.parametrize(("name", "content"), [
    ("not-yaml.yaml", "spec: [unclosed\n"),
    ("missing.yaml", None),
], ids=["not YAML", "missing file"])
def test_an_unreadable_file_exits_2(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                    name: str, content: str | None) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    assert cli.main(["shape", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fitgate shape check: {path}:"), err


def test_the_shipped_crd_is_the_charts() -> None:
    chart = EXAMPLES.parents[1] / "charts" / "fitgate" / "crds" / "nodeshapes.fitgate.io.yaml"
    assert shapecheck.CRD_FILE.read_text() == chart.read_text(), (
        f"{shapecheck.CRD_FILE} is a copy of {chart} shipped in the package: copy it again")
