"""The compiled core and the reference agree on random cases (fitcore.testing.case).

Cases are drawn by seed, so a failure names a seed that reproduces it exactly:
`python -c "import json, fitcore.testing as t; print(json.dumps(t.case(SEED)))"`.
FITCORE_PROPERTY_EXAMPLES sets the number of cases (default 10,000).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import api, kube, model, testing
from tests.fitcore.conftest import _check_allocation

EXAMPLES = int(os.environ.get("FITCORE_PROPERTY_EXAMPLES", "10000"))

pytestmark = pytest.mark.skipif(not api.compiled_available(),
                                reason="compares the compiled core; FITCORE_NO_EXTENSIONS is set")


def run(case: dict, engine: str):
    inventory = kube.inventory(case["slices"], case["classes"], case["allocated"])
    claims = [kube.resource_claim(c) for c in case["claims"]]
    node = kube.node(case["node"])
    if engine == "c":
        # First ask the same question (fresh claim objects) on an empty cluster and with
        # half of the allocations, on the same slices: the compiled problem is then kept
        # and the case's own allocated state is applied to it, as when pods arrive one
        # after another.
        half = kube.inventory([], [], case["allocated"][: len(case["allocated"]) // 2])
        for allocated in (model.AllocatedState(), half.allocated):
            api.allocate(node, model.Inventory(inventory.slices, inventory.classes, allocated),
                         [kube.resource_claim(c) for c in case["claims"]], engine=engine,
                         budget=200_000)
    result = api.allocate(node, inventory, claims, engine=engine, budget=200_000)
    if result.fits:
        _check_allocation(inventory, claims, result)
    return result


@pytest.mark.timeout(900)
@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_compiled_agrees_with_reference(seed: int) -> None:
    case = testing.case(seed)
    py = run(case, "py")
    c = run(case, "c")
    if py.verdict == "undecided" or c.verdict == "undecided":
        return
    assert c.verdict == py.verdict, (
        f"seed {seed}: compiled says {c.verdict}, reference says {py.verdict}\n"
        f"case: {json.dumps(case)}\nreasons: {py.reasons} / {c.reasons}")


REALISTIC_EXAMPLES = int(os.environ.get("FITCORE_REALISTIC_EXAMPLES", "300"))


def realistic_case(seed: int) -> dict:
    """One node of a realistic cluster (tests/gang/realistic.py: unique uuids, random
    devices and MIG partitions in use) and one pod's claims from its templates."""
    import random

    from tests.gang import realistic as rl

    rng = random.Random(seed)
    index = rng.randrange(3) * 4  # racks of 4: H100, A100, A30 nodes in turn
    objects = rl.classes() + rl.node_objects(rng, index, rack_size=4)
    template = rng.choice([rl.template(gpus=rng.choice([1, 4, 8])),
                           rl.template(nic=False, model=rng.choice(["H100", "A100"]),
                                       gpus=rng.choice([2, 4, 8])),
                           rl.mig_template(slices=rng.choice([1, 2, 3]))])
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "pod-0", "namespace": "team"},
             "spec": template["spec"]["spec"]}
    return {"node": next(o for o in objects if o["kind"] == "Node"),
            "slices": [o for o in objects if o["kind"] == "ResourceSlice"],
            "classes": [o for o in objects if o["kind"] == "DeviceClass"],
            "allocated": [o for o in objects if o["kind"] == "ResourceClaim"],
            "claims": [claim]}


@pytest.mark.timeout(900)
@settings(max_examples=REALISTIC_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_compiled_agrees_with_reference_on_realistic_nodes(seed: int) -> None:
    case = realistic_case(seed)
    py = run(case, "py")
    c = run(case, "c")
    assert py.verdict != "undecided" and c.verdict == py.verdict, (
        f"seed {seed}: compiled says {c.verdict}, reference says {py.verdict}\n"
        f"reasons: {py.reasons} / {c.reasons}")
