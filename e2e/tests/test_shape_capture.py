"""`kubectl fitgate shape capture` against the real API server: a NodeShape the API server
stores, from a kwok node and the ResourceSlices the fake DRA driver published for it.

Two kwok nodes of one pool publish GPUs with a UUID attribute; a DeviceClass selects on
it. The plugin (as kubectl runs it) prints a shape whose labels are the pool's (no
hostname), whose slices are the node's without nodeName or the node's pool name, and
without the UUID, which it reports on stderr with the DeviceClass that selects on it.
The shape passes `fitgate shape check`, loads into fitcore, and the API server (with the
chart's NodeShape CRD) stores it.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import sys
import uuid

import pytest
import yaml

import fitcore
from e2e import builders, dra_driver, harness, kube
from e2e.cluster.local import cluster

pytestmark = [pytest.mark.e2e]

CRD = pathlib.Path(__file__).parents[2] / "charts/fitgate/crds/nodeshapes.fitgate.io.yaml"
SHAPE_API = "fitgate.io/v1alpha1"


async def _run(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.timeout(240)
async def test_a_captured_kwok_node_is_a_shape_the_api_server_stores(
        e2e: harness.Harness, kubeconfig: pathlib.Path, tmp_path: pathlib.Path) -> None:
    await e2e.kube.apply(yaml.safe_load(CRD.read_text()))

    async def established() -> bool:
        crd = await e2e.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                 "nodeshapes.fitgate.io")
        return kube.has_condition(crd, "Established")
    await e2e.wait_for(established, 60, "the NodeShape CRD established")

    pool = f"cap-{e2e.namespace[-8:]}"
    devices = builders.gpu_devices(2, per_pcie_root=2)
    for dev in devices:
        dev["attributes"]["uuid"] = {"string": f"GPU-{uuid.uuid4()}"}
    nodes = await e2e.create_node_pool(pool, 2, devices)
    by_uuid = f"{pool}-by-uuid"
    await e2e.kube.create({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": by_uuid},
        "spec": {"selectors": [{"cel": {"expression":
            'device.attributes["resource.kubernetes.io"].pcieRoot != "" && '
            f'has(device.attributes["{dra_driver.DEFAULT_DRIVER}"].uuid)'}}]}})
    name = f"captured-{e2e.namespace}"
    try:
        plugin = pathlib.Path(sys.executable).parent / "kubectl-fitgate"
        code, out, err = await _run(str(plugin), "shape", "capture", nodes[0], "--name", name,
                                    "--kubeconfig", str(kubeconfig))
        assert code == 0, err
        print(out, err)
        shape = yaml.safe_load(out)
        spec = shape["spec"]
        assert spec["nodeLabels"][cluster.SHAPE_LABEL] == pool
        assert "kubernetes.io/hostname" not in spec["nodeLabels"]
        [s] = [s for s in spec["resourceSlices"] if s["devices"]]
        assert "nodeName" not in s and nodes[0] not in s["pool"]["name"]
        assert [d["name"] for d in s["devices"]] == ["gpu-0", "gpu-1"]
        assert all("uuid" not in d["attributes"] for d in s["devices"])
        assert all(builders.PCIE_ROOT in d["attributes"] for d in s["devices"])
        assert "uuid" in err and by_uuid in err, err

        path = tmp_path / "shape.yaml"
        path.write_text(out)
        fitgate = pathlib.Path(sys.executable).parent / "fitgate"
        code, found, err = await _run(str(fitgate), "shape", "check", str(path))
        assert (code, found) == (0, ""), found + err
        fitcore.Inventory().apply("ADDED", shape)

        stored = await e2e.kube.create(shape)
        assert stored["spec"]["resourceSlices"][0]["devices"] == s["devices"]
    finally:
        for kind, obj in (("NodeShape", name), ("DeviceClass", by_uuid)):
            api = SHAPE_API if kind == "NodeShape" else "resource.k8s.io/v1"
            with contextlib.suppress(kube.NotFound):
                await e2e.kube.delete(api, kind, obj)
