"""`fitgate shape capture`: the NodeShape of a live node's group, from the fake client.

Two nodes of one group publish GPUs with per-node UUIDs and PCI bus addresses, a card
number whose name gives nothing away (it only differs from the other node's) and
attributes the group shares; a DeviceClass selects on the UUID and a claim template
matches on the bus address. The shape keeps the group's labels, taints, allocatable and
devices, leaves out the rest and says so, loads into fitcore and passes `fitgate shape
check` (round trip); every call is one `rbac.SHAPE_CAPTURE` declares.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
import yaml

import fitcore
from admission.app import cli, shapecheck, shapes
from admission.kube import errors, fake, kinds, rbac

DRIVER = "gpu.example.com"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def node(name: str, rack: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "example.com/driver-version": "570.2",
                "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64",
                "cloud.google.com/gke-nodepool": "a3-pool",
                "topology.kubernetes.io/zone": "zone-a",
                "topology.example.com/rack": rack,
                "example.com/machine": f"vm-{name}"}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": "96", "memory": "1000Gi", "pods": "110"}}}


def gpu(i: int, node_no: int) -> dict[str, Any]:
    return {"name": f"gpu-{i}",
            "attributes": {
                "uuid": {"string": f"GPU-{node_no:08x}-1c4d-4e5f-8a9b-{i:012x}"},
                "pciBusID": {"string": f"0000:{16 * node_no + i:02x}:00.0"},
                "cardNumber": {"int": 1000 * node_no + i},
                "index": {"int": i},
                "productName": {"string": "H100"},
                PCIE_ROOT: {"string": f"pci{i // 2}"}},
            "capacity": {"memory": {"value": "80Gi"}}}


def resource_slice(node_name: str, node_no: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpu"},
            "spec": {"driver": DRIVER, "nodeName": node_name,
                     "pool": {"name": f"{node_name}-gpus", "generation": 7,
                              "resourceSliceCount": 1},
                     "devices": [gpu(i, node_no) for i in range(4)]}}


def world() -> fake.FakeClient:
    api = fake.FakeClient(permissions=rbac.SHAPE_CAPTURE)
    api.seed(kinds.NODE, node("gke-a3-1", "r1", taints=[
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
         "timeAdded": "2026-01-01T00:00:00Z"}]))
    second = node("gke-a3-2", "r2")
    second["metadata"]["labels"]["example.com/driver-version"] = "570.1"
    api.seed(kinds.NODE, second)
    other = node("cpu-1", "r1")
    other["metadata"]["labels"]["cloud.google.com/gke-nodepool"] = "cpu-pool"
    api.seed(kinds.NODE, other)
    api.seed(kinds.RESOURCE_SLICE, resource_slice("gke-a3-1", 1))
    api.seed(kinds.RESOURCE_SLICE, resource_slice("gke-a3-2", 2))
    api.seed(kinds.DEVICE_CLASS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu-by-uuid"},
        "spec": {"selectors": [{"cel": {"expression":
            f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].uuid != ""'}}]}})
    api.seed(kinds.DEVICE_CLASS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    api.seed(kinds.RESOURCE_CLAIM_TEMPLATE, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "same-bus", "namespace": "team-a"},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu", "count": 2}}],
            "constraints": [{"matchAttribute": f"{DRIVER}/pciBusID"}]}}}})
    return api


def capture(api: fake.FakeClient, node_name: str = "gke-a3-1", **kw: Any) -> shapes.Capture:
    return asyncio.run(shapes.capture(api, node_name, **kw))


def test_the_shape_holds_the_groups_labels_taints_allocatable_and_devices() -> None:
    got = capture(world())
    spec = got.shape["spec"]
    assert got.shape["metadata"]["name"] == "a3-pool"  # the node pool's label
    assert spec["nodeLabels"] == {"cloud.google.com/gke-nodepool": "a3-pool",
                                  "kubernetes.io/arch": "amd64",
                                  "topology.kubernetes.io/zone": "zone-a"}
    assert set(got.left_out_labels) == {"kubernetes.io/hostname", "topology.example.com/rack",
                                        "example.com/machine", "example.com/driver-version"}
    assert got.left_out_labels["example.com/driver-version"] == (
        "node gke-a3-2 of the group has '570.1'")
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "value": "present",
                               "effect": "NoSchedule"}]
    assert got.left_out_taints == ["node.kubernetes.io/unschedulable:NoSchedule"]
    assert spec["allocatable"] == {"cpu": "96", "memory": "1000Gi", "pods": "110"}
    assert got.group == ["gke-a3-1", "gke-a3-2"]
    [s] = spec["resourceSlices"]
    assert s["pool"] == {"name": "a3-pool-gpus", "resourceSliceCount": 1}
    assert "nodeName" not in s
    assert [d["name"] for d in s["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert s["devices"][3]["attributes"] == {"index": {"int": 3},
                                             "productName": {"string": "H100"},
                                             PCIE_ROOT: {"string": "pci1"}}


def test_per_node_attributes_are_left_out_with_who_selects_on_them() -> None:
    got = capture(world())
    flagged = {p.attribute: p for p in got.per_node}
    assert set(flagged) == {f"{DRIVER}/uuid", f"{DRIVER}/pciBusID", f"{DRIVER}/cardNumber"}
    assert "UUID" in flagged[f"{DRIVER}/uuid"].why
    assert "PCI bus address" in flagged[f"{DRIVER}/pciBusID"].why
    assert "gke-a3-2" in flagged[f"{DRIVER}/cardNumber"].why  # only differs across nodes
    assert flagged[f"{DRIVER}/uuid"].selected_by == ("DeviceClass gpu-by-uuid (CEL selector)",)
    assert flagged[f"{DRIVER}/pciBusID"].selected_by == (
        "ResourceClaimTemplate team-a/same-bus (matchAttribute)",)
    assert flagged[f"{DRIVER}/cardNumber"].selected_by == ()
    text = got.to_yaml()
    assert "# Per-node device attributes left out" in text
    assert "gpu-by-uuid" in text and "kubernetes.io/hostname" in text
    assert [w for w in got.warnings() if "uuid" in w and "gpu-by-uuid" in w]


def test_a_single_node_group_flags_only_what_looks_like_an_identity() -> None:
    api = world()
    api.remove(kinds.NODE, "gke-a3-2")
    got = capture(api)
    flagged = {p.attribute: p.why for p in got.per_node}
    assert set(flagged) == {f"{DRIVER}/uuid", f"{DRIVER}/pciBusID"}
    assert "no other node of the group" in flagged[f"{DRIVER}/pciBusID"]
    assert got.group == ["gke-a3-1"]


def test_bus_addresses_shared_by_the_group_are_kept() -> None:
    api = world()
    same = resource_slice("gke-a3-2", 2)
    for i, dev in enumerate(same["spec"]["devices"]):
        dev["attributes"]["pciBusID"] = {"string": f"0000:{16 + i:02x}:00.0"}
    api.seed(kinds.RESOURCE_SLICE, same)
    got = capture(api)
    assert f"{DRIVER}/pciBusID" not in {p.attribute for p in got.per_node}
    dev = got.shape["spec"]["resourceSlices"][0]["devices"][1]
    assert dev["attributes"]["pciBusID"] == {"string": "0000:11:00.0"}


def test_keep_per_node_attributes_keeps_them_and_still_warns() -> None:
    got = capture(world(), keep_per_node=True, name="mine")
    assert got.shape["metadata"]["name"] == "mine"
    dev = got.shape["spec"]["resourceSlices"][0]["devices"][0]
    assert "uuid" in dev["attributes"]
    assert got.per_node


def test_claims_the_user_may_not_list_are_reported_not_fatal() -> None:
    api = world()
    api.fail_next(errors.ApiError(403, "Forbidden", "resourceclaims is forbidden"),
                  verb="list", kind=kinds.RESOURCE_CLAIM)
    got = capture(api)
    assert len(got.unread) == 1 and "resourceclaims" in got.unread[0]
    assert any("could not read resourceclaims" in w for w in got.warnings())


def test_a_missing_node_is_not_found() -> None:
    with pytest.raises(errors.NotFound):
        capture(world(), "nope")


def test_round_trip_the_captured_shape_loads_into_fitcore_and_passes_check(
        tmp_path: pathlib.Path) -> None:
    got = capture(world())
    path = tmp_path / "shape.yaml"
    path.write_text(got.to_yaml())
    [obj] = yaml.safe_load_all(path.read_text())
    engine = fitcore.Inventory()
    engine.apply("ADDED", obj)
    [shape] = engine.shapes()
    assert shape.name == "a3-pool" and len(shape.slices[0].devices) == 4
    assert shapecheck.check_files([str(path)]) == []


def connect_to(api: fake.FakeClient) -> Any:
    async def connect(kubeconfig: str | None, context: str | None) -> fake.FakeClient:
        return api
    return connect


def run_cli(argv: list[str], api: fake.FakeClient) -> int:
    return cli.run_shape(cli._parser().parse_args(argv), connect=connect_to(api))


def test_cli_prints_yaml_and_warns_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    api = world()
    assert run_cli(["shape", "capture", "gke-a3-1"], api) == 0
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)
    assert doc["kind"] == "NodeShape" and doc["metadata"]["name"] == "a3-pool"
    assert out.startswith("# NodeShape captured by `fitgate shape capture` from node gke-a3-1")
    assert "warning: device attribute gpu.example.com/uuid" in err
    assert {c.verb for c in api.calls} == {"get", "list"}  # reads only


def test_cli_a_missing_node_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["shape", "capture", "nope"], world()) == 1
    assert "node 'nope' not found" in capsys.readouterr().err


def test_every_call_is_declared_for_capture() -> None:
    api = world()
    capture(api)
    for call in api.calls:
        rbac.check(kinds.BY_NAME[call.kind], call.verb, call.subresource, rbac.SHAPE_CAPTURE)


@pytest.mark.parametrize("kubeconfig", ["missing", "garbage"])
def test_cli_a_bad_kubeconfig_is_a_message_not_a_traceback(
        kubeconfig: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = tmp_path / kubeconfig
    if kubeconfig == "garbage":
        path.write_text("clusters: [unclosed\n")
    assert cli.main(["shape", "capture", "n1", "--kubeconfig", str(path)]) == cli.EXIT_KUBECONFIG
    # The client library's own log line may come first; the command ends on its message.
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"fitgate shape capture: cannot use kubeconfig {path}"), last


def test_cli_an_unreachable_server_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    api = world()
    api.fail_next(errors.ApiError(0, "Unreachable", "connection refused"), verb="get")
    assert run_cli(["shape", "capture", "gke-a3-1"], api) == cli.EXIT_UNREACHABLE
    assert "cannot reach the API server: 0 Unreachable" in capsys.readouterr().err
