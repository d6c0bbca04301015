"""bench.alloc's "new content" column asks a question the node has never seen, with the
same answer as the original claims."""

from __future__ import annotations

import pytest

from bench import alloc as per_node
from bench import compare
from fitcore import api, kube
from tests.fitcore import builders as b


@pytest.mark.parametrize("case", compare.CASES, ids=[c[1] for c in compare.CASES])
def test_renamed_claims_get_the_original_verdict(case: tuple) -> None:
    _group, _name, layout, claims_json, allocated = case
    inventory = kube.inventory(layout(), [b.gpu_class(), b.nic_class()], allocated)
    node = kube.node(b.node())
    original = api.allocate(node, inventory, [kube.resource_claim(c) for c in claims_json])
    renamed = [per_node._renamed(c, "n1") for c in claims_json]
    again = api.allocate(node, inventory, [kube.resource_claim(c) for c in renamed])
    assert again.verdict == original.verdict


def test_renaming_follows_constraints_and_subrequests() -> None:
    claim = {"spec": {"devices": {
        "requests": [{"name": "gpu", "exactly": {}}, {"name": "nic", "firstAvailable": []}],
        "constraints": [{"requests": ["gpu", "nic/fast"], "matchAttribute": "x"}],
        "config": [{"requests": ["gpu"]}]}}}
    out = per_node._renamed(claim, "n7")["spec"]["devices"]
    assert [r["name"] for r in out["requests"]] == ["gpu-n7", "nic-n7"]
    assert out["constraints"][0]["requests"] == ["gpu-n7", "nic-n7/fast"]
    assert out["config"][0]["requests"] == ["gpu-n7"]
    assert claim["spec"]["devices"]["requests"][0]["name"] == "gpu"  # a copy
