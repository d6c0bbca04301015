"""fitgate's CRDs refuse what fitgate refuses: the API server and fitcore agree on NodeShapes.

A NodeShape the API server stores but fitgate cannot read would be dropped by the
service; one the API server refuses is refused at ``kubectl apply``, where its author
sees it. So for each malformed shape below, the real kube-apiserver (with the chart's CRD
installed) refuses it naming the field, and fitcore's reader refuses it too; a well-formed
shape passes both. Shapes are posted with ``dryRun=All``: validated in full, never stored,
so no other test sees them.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from e2e import harness, kube
from fitcore import errors, workload

CRD = pathlib.Path(__file__).parents[2] / "charts/fitgate/crds/nodeshapes.fitgate.io.yaml"
SHAPE_API = "fitgate.io/v1alpha1"

GOOD: dict[str, Any] = {
    "apiVersion": SHAPE_API, "kind": "NodeShape", "metadata": {"name": "crd-check"},
    "spec": {
        "nodeLabels": {"pool": "gpu"},
        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": 110},
        "resourceSlices": [{
            "driver": "gpu.example.com",
            "devices": [{"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}},
                        {"name": "gpu-1", "capacity": {"memory": {"value": 85899345920}}}],
        }],
        "price": "12.5",
        "maxNodes": 4,
    },
}


def _edit(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    shape = copy.deepcopy(GOOD)
    change(shape["spec"])
    return shape


# (what is wrong, the shape, a word of the field path both must name)
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("negative allocatable", _edit(lambda s: s["allocatable"].update(cpu="-4")), "allocatable"),
    ("malformed allocatable", _edit(lambda s: s["allocatable"].update(memory="8 GiB")),
     "allocatable"),
    ("malformed capacity",
     _edit(lambda s: s["resourceSlices"][0]["devices"][0]["capacity"]["memory"].update(
         value="80GB!")), "capacity"),
    ("duplicate device names",
     _edit(lambda s: s["resourceSlices"][0]["devices"][1].update(name="gpu-0")), "devices"),
    ("negative price", _edit(lambda s: s.update(price=-3)), "price"),
    ("negative maxNodes", _edit(lambda s: s.update(maxNodes=-1)), "maxNodes"),
    ("a slice that selects nodes",
     _edit(lambda s: s["resourceSlices"][0].update(nodeName="node-1")), "resourceSlices"),
]


@pytest.fixture
async def shape_crd(e2e: harness.Harness) -> None:
    """The chart's NodeShape CRD, applied as helm would and left behind as helm leaves it."""
    await e2e.kube.apply(yaml.safe_load(CRD.read_text()))

    async def established() -> bool:
        crd = await e2e.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                 "nodeshapes.fitgate.io")
        return kube.has_condition(crd, "Established")
    await e2e.wait_for(established, 60, "the NodeShape CRD established")


async def _post_dry_run(e2e: harness.Harness, shape: dict[str, Any]) -> str | None:
    """None if the API server would store `shape`, else its refusal."""
    try:
        await e2e.kube.request("POST", kube.path_for(SHAPE_API, "NodeShape"), shape,
                               query={"dryRun": "All"})
    except ApiException as exc:
        assert exc.status == 422, exc
        return str(exc.reason)
    return None


async def test_a_well_formed_shape_passes_both(e2e: harness.Harness, shape_crd: None) -> None:
    assert await _post_dry_run(e2e, GOOD) is None
    shape = workload.node_shape(GOOD)
    assert shape.name == "crd-check"


@pytest.mark.parametrize(("what", "shape", "field"), BAD, ids=[b[0] for b in BAD])
async def test_the_crd_refuses_what_fitgate_refuses(e2e: harness.Harness, shape_crd: None,
                                                    what: str, shape: dict[str, Any],
                                                    field: str) -> None:
    refusal = await _post_dry_run(e2e, shape)
    assert refusal is not None, f"the API server stored a shape with {what}"
    assert field in refusal, refusal
    with pytest.raises(errors.InputError) as refused:
        workload.node_shape(shape)
    assert field in str(refused.value), refused.value
