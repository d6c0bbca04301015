"""Fixtures for gang tests: parse a list of objects into a bundle and run fit/plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from fitcore import api, gang, plan, workload
from tests.gang import builders as gb

ENGINES = ["py", "c"] if api.compiled_available() else ["py"]


@pytest.fixture(params=ENGINES, ids=lambda e: f"engine={e}")
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def load(objects: Sequence[dict[str, Any]]) -> workload.Bundle:
    docs = [(o, "test.yaml") for o in [*gb.classes(), *objects]]
    return workload.load(docs)


PlanFn = Callable[..., plan.PlanResult]


@pytest.fixture
def run_plan(engine: str) -> PlanFn:
    def run(objects: Sequence[dict[str, Any]]) -> plan.PlanResult:
        bundle = load(objects)
        assert len(bundle.gangs) == 1
        snapshot = gang.Snapshot(bundle.nodes, bundle.inventory, bundle.used)
        result = plan.plan(bundle.gangs[0], snapshot, bundle.shapes, engine=engine)  # type: ignore[arg-type]
        placements = result.placements or (result.plan.placements if result.plan else ())
        shared = {pc.name for ps in bundle.gangs[0].pod_sets for pc in ps.claims if pc.shared}
        check_placements(placements, shared)
        return result

    return run


def check_placements(placements: Sequence[gang.Placement], shared: set[str],
                     cluster_pools: frozenset[str] = frozenset({"fabric"})) -> None:
    """Independent checks: no device twice (unless the same shared claim), devices of a
    pod come from pools of its node (pool names carry the node name in these tests), or
    from a pool of the whole cluster ("fabric" in these tests)."""
    seen: dict[str, str] = {}
    for p in placements:
        for claim, results in p.devices:
            for r in results:
                assert p.node in r.id.pool or r.id.pool in cluster_pools, \
                    f"{p} uses {r.id} of another node"
                if r.shared or r.admin_access:
                    continue  # a share of a multi-allocatable device, or admin access
                who = claim if claim in shared else f"{p.pod_set}[{p.index}]/{claim}"
                owner = seen.setdefault(str(r.id), who)
                assert owner == who, f"{r.id} allocated to {owner} and {who}"
