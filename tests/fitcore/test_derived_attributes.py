"""A request with derivedAttributes (DRADerivedAttributes, alpha, off by default in 1.37)
is an error, as the default allocator answers (upstream table: derived-attributes*).
Both engines, both versions."""

from __future__ import annotations

from typing import Any

import pytest

from fitcore import api, kube, model, versions
from tests.fitcore import builders as b

DERIVED = [{"name": "derived/numa", "from": [{"attribute": "resource.kubernetes.io/numaNode"}]}]


def _fit(claim: dict[str, Any], engine: str, kube_version: versions.KubeVersion
         ) -> model.NodeFit:
    inventory = kube.inventory([b.rslice("s", b.gpus(2))], [b.gpu_class()], [])
    return api.allocate(kube.node(b.node()), inventory, [kube.resource_claim(claim)],
                        engine=engine, kube=kube_version)  # type: ignore[arg-type]


@pytest.mark.parametrize("kube_version", [versions.V1_36, versions.V1_37], ids=str)
def test_derived_attributes_are_an_error(engine: str, kube_version: versions.KubeVersion
                                         ) -> None:
    plain = b.req("r")
    assert _fit(b.claim("c", plain), engine, kube_version).fits
    derived = {"name": "r", "exactly": {**plain["exactly"], "derivedAttributes": DERIVED}}
    fit = _fit(b.claim("c", derived), engine, kube_version)
    assert fit.verdict == "error" and "derivedAttributes" in fit.reasons[0], fit
    # In a firstAvailable subrequest too, even when an earlier subrequest could fit.
    sub = b.first_available("r", ("a", b.exact()), ("b", {**b.exact(), "derivedAttributes":
                                                          DERIVED}))
    fit = _fit(b.claim("c", sub), engine, kube_version)
    assert fit.verdict == "error" and "r/b" in fit.reasons[0], fit
    # An empty list sets nothing.
    empty = {"name": "r", "exactly": {**plain["exactly"], "derivedAttributes": []}}
    assert _fit(b.claim("c", empty), engine, kube_version).fits
