"""Fixtures for fitcore tests: every engine test runs against both engines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fitcore import api, kube, model, schema

ENGINES = ["py", "c"] if api.compiled_available() else ["py"]
READERS = ["py", "c"] if schema.compiled is not None else ["py"]


@pytest.fixture(params=READERS, ids=lambda e: f"reader={e}")
def reader(request: pytest.FixtureRequest) -> Iterator[str]:
    """Objects are read (the strict field check, a slice's devices) by the compiled reader
    (`c`, fitcore/_read.pyx; only when built) or by its Python reference (`py`)."""
    with pytest.MonkeyPatch.context() as m:
        if request.param == "py":
            m.setattr(kube, "_COMPILED", None)
            m.setattr(schema, "_compiled_schema", lambda: None)
        yield str(request.param)


@pytest.fixture(params=ENGINES, ids=lambda e: f"engine={e}")
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


FitFn = Callable[..., model.NodeFit]


@pytest.fixture
def fit(engine: str) -> FitFn:
    """fit(slices=[...], classes=[...], claims=[...], allocated=[...], node=...) -> NodeFit."""

    def run(*, slices: list[dict[str, Any]], claims: list[dict[str, Any]],
            classes: list[dict[str, Any]] | None = None,
            allocated: list[dict[str, Any]] | None = None,
            node: dict[str, Any] | None = None, budget: int = api.DEFAULT_BUDGET
            ) -> model.NodeFit:
        from tests.fitcore import builders as b

        inventory = kube.inventory(slices, classes if classes is not None else
                                   [b.gpu_class(), b.nic_class()], allocated or [])
        parsed_node = kube.node(node or b.node())
        parsed_claims = [kube.resource_claim(c) for c in claims]
        result = api.allocate(parsed_node, inventory, parsed_claims, engine=engine,  # type: ignore[arg-type]
                              budget=budget)
        if result.fits:
            _check_allocation(inventory, parsed_claims, result)
        return result

    return run


def _check_allocation(inventory: model.Inventory, claims: list[model.Claim],
                      result: model.NodeFit) -> None:
    """Independent sanity checks on any allocation an engine returns."""
    assert len(result.allocations) == len(claims)
    dedicated: set[model.DeviceId] = set()
    for claim, devices in zip(claims, result.allocations, strict=True):
        assert len(devices) <= model.MAX_DEVICES_PER_CLAIM
        names = {r.request.split("/")[0] for r in devices}
        assert names == {r.name for r in claim.requests}, (names, claim)
        for r in devices:
            if not r.shared and not r.admin_access:
                assert r.id not in dedicated, f"{r.id} allocated twice"
                assert r.id not in inventory.allocated.dedicated, f"{r.id} already in use"
                dedicated.add(r.id)
