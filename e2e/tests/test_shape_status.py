"""NodeShape status on a real API server (issue #21 item 4).

fitgate installed with its chart (CRDs, RBAC, configuration) and `fitgate serve` running
as the chart's ServiceAccount (`fitgate_installed`). Two shapes are applied: a valid one
whose node labels two kwok nodes carry, and one the CRD accepts but fitgate's engine
refuses (a device attribute name that is not a C identifier). Checked: the leader writes
`Valid=True` and `nodes: 2` on the first; `Valid=False`, reason `Invalid`, the field named,
on the second, with a Warning Event `InvalidShape` regarding it; `kubectl get nodeshapes`
shows both in its `Valid` and `Nodes` columns; a node deleted is counted out; a fixed
shape turns valid. And `fitgate serve`, with the chart's `kube_version: auto`, followed
the API server's Kubernetes minor (item 2).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from e2e import builders, dra_driver, harness, kube
from e2e.scenarios import fitgate
from e2e.tests.test_chart import Tools
from e2e.tests.test_chart import tools as tools

pytestmark = [pytest.mark.e2e]

SHAPE_API = "fitgate.io/v1alpha1"
FIELD = "spec.resourceSlices[0].devices[0].attributes['bad name!']"


def _shape(name: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": SHAPE_API, "kind": "NodeShape", "metadata": {"name": name},
            "spec": {"nodeLabels": {dra_driver.SHAPE_LABEL: pool},
                     "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                     "resourceSlices": [{"driver": "gpu.example.com", "devices": [
                         {"name": "gpu-0", "attributes": {"model": {"string": "H100"}}}]}],
                     "price": 10}}


def _valid(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    cond = kube.condition(obj, "Valid") if obj else None
    return cond if cond and "observedGeneration" in (obj or {}).get("status", {}) else None


def _columns(header: str, line: str) -> dict[str, str]:
    """One row of kubectl's table by the header's column positions (an empty cell, such
    as a shape's unset Domain, leaves no word to split on)."""
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): line[a:b].strip() for a, b in zip(starts, ends, strict=True)}


@pytest.mark.timeout(300)
async def test_shapes_say_whether_fitgate_uses_them_and_count_their_nodes(
        e2e: harness.Harness, fitgate_installed: fitgate.Fitgate, tools: Tools) -> None:
    pool = f"shape-status-{e2e.namespace}"[:63]
    good_name, bad_name = f"{pool}-good"[:253], f"{pool}-bad"[:253]
    nodes = await e2e.create_node_pool(pool, 2, builders.gpu_devices(2, per_pcie_root=2))
    good = _shape(good_name, pool)
    bad = copy.deepcopy(_shape(bad_name, pool))
    bad["spec"]["resourceSlices"][0]["devices"][0]["attributes"]["bad name!"] = {"string": "x"}
    try:
        for shape in (good, bad):
            await e2e.kube.apply(shape)  # the CRD accepts both

        async def status_of(name: str, want: str, count: int
                            ) -> tuple[dict[str, Any], dict[str, Any]] | None:
            obj = await e2e.kube.get(SHAPE_API, "NodeShape", name)
            cond = _valid(obj)
            if obj is None or cond is None or cond["status"] != want \
                    or obj["status"].get("nodes") != count:
                return None
            return obj, cond
        obj, cond = await e2e.wait_for(lambda: status_of(good_name, "True", 2), 60,
                                       "Valid=True and 2 nodes on the valid shape")
        assert cond["reason"] == "Valid"
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        obj, cond = await e2e.wait_for(lambda: status_of(bad_name, "False", 2), 60,
                                       "Valid=False on the shape fitgate refuses")
        assert cond["reason"] == "Invalid"
        assert FIELD in cond["message"] and "C identifier" in cond["message"], cond

        async def warning() -> dict[str, Any] | None:
            events = await e2e.kube.list("events.k8s.io/v1", "Event", "default")
            return next((ev for ev in events
                         if (ev.get("regarding") or {}).get("name") == bad_name
                         and ev.get("reason") == "InvalidShape"), None)
        event = await e2e.wait_for(warning, 30, "a Warning Event InvalidShape on the shape")
        assert event["type"] == "Warning"
        assert event["regarding"]["kind"] == "NodeShape" and FIELD in event["note"]
        assert event["reportingController"] == "fitgate.io/topology-fit"

        # kubectl's columns (the CRD's additionalPrinterColumns, as a user reads them).
        out = tools.kubectl("get", "nodeshapes", good_name, bad_name, "--no-headers", "-o",
                            "custom-columns=NAME:.metadata.name").stdout.split()
        assert sorted(out) == sorted([good_name, bad_name])
        table = tools.kubectl("get", "nodeshapes", good_name, bad_name).stdout.splitlines()
        header = table[0].split()
        assert header[:3] == ["NAME", "VALID", "PRICE"] and "NODES" in header, header
        rows = {r["NAME"]: r for r in (_columns(table[0], line) for line in table[1:])}
        assert (rows[good_name]["VALID"], rows[good_name]["NODES"]) == ("True", "2")
        assert (rows[bad_name]["VALID"], rows[bad_name]["NODES"]) == ("False", "2")

        # A node goes: counted out. The bad shape fixed: Valid, same generation observed.
        await e2e.kube.delete("v1", "Node", nodes[0])
        await e2e.wait_for(lambda: status_of(good_name, "True", 1), 60, "1 node counted")
        await e2e.kube.apply(_shape(bad_name, pool))
        obj, _ = await e2e.wait_for(lambda: status_of(bad_name, "True", 1), 60,
                                    "the fixed shape Valid")
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        # The chart leaves kube_version at auto: serve followed the API server's minor.
        server = await e2e.kube.request("GET", "/version")
        lines = [json.loads(x) for x in fitgate_installed.replicas[0].log_text().splitlines()
                 if x.startswith("{")]
        [followed] = [x for x in lines if x.get("event") == "serve.kube_version"]
        assert (followed["source"], followed["server"]) == ("api-server", server["gitVersion"])
        assert followed["kube_version"] == f"{server['major']}.{server['minor']}"
    finally:
        for name in (good_name, bad_name):
            await e2e.kube.delete(SHAPE_API, "NodeShape", name)
