"""Claims that differ from claims asked before only in their request names share the
compiled arrays (`compiled.Problem.renamed`) and still answer as the reference engine
does, with their own result names; the compiled allocated state (`_call.state`) is its
Python reference (`Problem._make_state`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import _call, api, cache, compiled, kube, model, testing, values
from tests.fitcore import builders as b
from tests.fitcore.test_property import EXAMPLES, REALISTIC_EXAMPLES, realistic_case

pytestmark = pytest.mark.skipif(not api.compiled_available(),
                                reason="tests the compiled core; FITCORE_NO_EXTENSIONS is set")

ROOT = "resource.kubernetes.io/pcieRoot"


def renamed(claim: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The claim with every request named `<name>-<suffix>`, and the constraints that
    name requests (`<name>` or `<name>/<subrequest>`) following them."""
    out = copy.deepcopy(claim)
    devices = out["spec"]["devices"]
    names = {r["name"]: f"{r['name']}-{suffix}" for r in devices["requests"]}
    for request in devices["requests"]:
        request["name"] = names[request["name"]]
    for constraint in devices.get("constraints", []):
        if "requests" in constraint:
            constraint["requests"] = [
                names.get(ref.partition("/")[0], ref.partition("/")[0])
                + "".join(ref.partition("/")[1:]) for ref in constraint["requests"]]
    return out


def kept_problem(node: model.Node, inventory: model.Inventory,
                 claims: list[model.Claim]) -> compiled.Problem:
    found = api._compile(node, inventory, claims)
    assert isinstance(found, tuple), found
    return found[0]


def answers_as_reference(case: dict[str, Any]) -> None:
    """Ask the case's claims, then the same claims renamed, in one store: the renamed
    question answers as the reference engine does, and a fit names the renamed requests."""
    inventory = kube.inventory(case["slices"], case["classes"], case["allocated"])
    node = kube.node(case["node"])
    with cache.use(cache.Store()):
        api.allocate(node, inventory, [kube.resource_claim(c) for c in case["claims"]],
                     engine="c", budget=200_000)
        claims = [kube.resource_claim(renamed(c, "x")) for c in case["claims"]]
        c = api.allocate(node, inventory, claims, engine="c", budget=200_000)
    py = api.allocate(node, inventory, claims, engine="py", budget=200_000)
    if "undecided" in (c.verdict, py.verdict):
        return
    assert c.verdict == py.verdict, (c, py)
    if c.fits:
        names = {r.name for claim in claims for r in claim.requests}
        assert all(result.request.partition("/")[0] in names
                   for per_claim in c.allocations for result in per_claim), c


@pytest.mark.timeout(900)
@settings(max_examples=min(EXAMPLES, 1000), derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_renamed_claims_answer_as_the_reference(seed: int) -> None:
    answers_as_reference(testing.case(seed))


@pytest.mark.timeout(900)
@settings(max_examples=min(REALISTIC_EXAMPLES, 100), derandomize=True, database=None,
          deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_renamed_claims_answer_as_the_reference_on_realistic_nodes(seed: int) -> None:
    answers_as_reference(realistic_case(seed))


def test_renamed_requests_share_the_arrays_not_the_results() -> None:
    """2 GPUs and a NIC on one root, asked under new request names: the same packed
    arrays, its own problem and results; the answer is the first one's, renamed."""
    slices = [b.rslice("gpus", [b.device(f"gpu-{i}", **{ROOT: f"pci{i // 2}"})
                                for i in range(4)]),
              b.rslice("nics", [b.device(f"nic-{r}", **{ROOT: f"pci{r}"}) for r in range(2)],
                       driver=b.NIC)]
    inventory = kube.inventory(slices, [b.gpu_class(), b.nic_class()], [])
    node = kube.node(b.node())
    claim = b.claim("c", b.req("g", count=2), b.req("n", "nic"), match=ROOT)
    with cache.use(cache.Store()):
        first = [kube.resource_claim(claim)]
        second = [kube.resource_claim(renamed(claim, "x"))]
        one, other = kept_problem(node, inventory, first), kept_problem(node, inventory,
                                                                         second)
        assert other is not one and other.packed is one.packed
        assert other.names == ("g-x", "n-x") and one.names == ("g", "n")
        fits = [api.allocate(node, inventory, c, engine="c") for c in (first, second)]
    assert [(r.request, r.id.device) for r in fits[1].allocations[0]] == [
        ("g-x", "gpu-0"), ("g-x", "gpu-1"), ("n-x", "nic-0")]
    assert [r.id for r in fits[0].allocations[0]] == [r.id for r in fits[1].allocations[0]]


def test_a_constraint_over_other_requests_is_another_problem() -> None:
    """The walk's key holds which alternatives each constraint covers: a match over both
    requests and one over the GPUs alone do not share arrays, and answer differently."""
    slices = [b.rslice("gpus", [b.device(f"gpu-{i}", **{ROOT: f"pci{i}"}) for i in range(2)]),
              b.rslice("nics", [b.device("nic-0", **{ROOT: "pci1"})], driver=b.NIC)]
    inventory = kube.inventory(slices, [b.gpu_class(), b.nic_class()], [])
    node = kube.node(b.node())
    both = b.claim("c", b.req("g"), b.req("n", "nic"), match=ROOT)
    gpus_only = copy.deepcopy(both)
    gpus_only["spec"]["devices"]["constraints"][0]["requests"] = ["g"]
    with cache.use(cache.Store()):
        claims = [[kube.resource_claim(c)] for c in (both, gpus_only)]
        problems = [kept_problem(node, inventory, c) for c in claims]
        assert problems[0].packed is not problems[1].packed
        fits = [api.allocate(node, inventory, c, engine="c") for c in claims]
    assert [r.id.device for r in fits[0].allocations[0]] == ["gpu-1", "nic-0"]
    assert [r.id.device for r in fits[1].allocations[0]] == ["gpu-0", "nic-0"]


def states_agree(case: dict[str, Any]) -> int:
    """`_call.state` is `Problem._make_state` for the case's allocated state and half of
    it, on the problem compiled for its claims; how many states were compared."""
    inventory = kube.inventory(case["slices"], case["classes"], case["allocated"])
    node = kube.node(case["node"])
    claims = [kube.resource_claim(c) for c in case["claims"]]
    half = kube.inventory([], [], case["allocated"][: len(case["allocated"]) // 2])
    compared = 0
    with cache.use(cache.Store()):
        found = api._compile(node, inventory, claims)
        if not isinstance(found, tuple):
            return 0
        problem = found[0]
        for allocated in (inventory.allocated, half.allocated, model.AllocatedState()):
            assert _call.state(problem, allocated) == problem._make_state(allocated)
            compared += 1
    return compared


def test_compiled_states_are_the_reference() -> None:
    compared = sum(states_agree(testing.case(seed)) for seed in range(300))
    compared += sum(states_agree(realistic_case(seed)) for seed in range(40))
    assert compared >= 300, compared


def test_compiled_results_are_the_dataclass() -> None:
    """`_call.device_result` makes what `model.DeviceResult` makes (equal, printed alike),
    with a map of its own when none is given."""
    ident = model.DeviceId(b.GPU, "n1", "gpu-0")
    take = {"memory": values.Quantity.parse("30Gi")}
    for made, built in (
            (_call.device_result("g", ident), model.DeviceResult("g", ident)),
            (_call.device_result("g/s", ident, True, take),
             model.DeviceResult("g/s", ident, shared=True, consumed_capacity=take))):
        assert made == built and repr(made) == repr(built)
    one, two = _call.device_result("g", ident), _call.device_result("g", ident)
    assert one.consumed_capacity == {} and one.consumed_capacity is not two.consumed_capacity
