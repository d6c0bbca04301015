"""The compiled look-up of a kept problem (`_call.kept`) gives what its Python reference
(`compiled._kept`) gives: for a content asked first, asked again, in a template that
differs only in a toleration of a taint no device has, and under other request names;
on the random cases of test_property, each engine with a store of its own. The fits
that follow are the same too; with FITCORE_NO_EXTENSIONS=1 the reference engine answers
as the compiled one does."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitcore import _call, api, cache, compiled, kube, model, testing
from tests.fitcore import builders as b
from tests.fitcore.test_property import EXAMPLES

pytestmark = pytest.mark.skipif(not api.compiled_available(),
                                reason="tests the compiled core; FITCORE_NO_EXTENSIONS is set")

Kept = Callable[..., object]


def variants(claim: dict[str, Any], serial: int) -> list[dict[str, Any]]:
    """The claim; again; tolerating a taint nobody has; with its requests renamed."""
    tolerant = copy.deepcopy(claim)
    renamed = copy.deepcopy(claim)
    devices = renamed["spec"]["devices"]
    names = {r["name"]: f"{r['name']}-n{serial}" for r in devices["requests"]}
    for request in tolerant["spec"]["devices"]["requests"]:
        for exact in [request["exactly"]] if "exactly" in request else \
                request["firstAvailable"]:
            exact.setdefault("tolerations", []).append(
                {"key": f"nobody.example.com/t{serial}", "operator": "Exists"})
    for request in devices["requests"]:
        request["name"] = names[request["name"]]
    for constraint in devices.get("constraints", []):
        if "requests" in constraint:
            constraint["requests"] = [
                names.get(ref.partition("/")[0], ref.partition("/")[0])
                + "".join(ref.partition("/")[1:]) for ref in constraint["requests"]]
    return [claim, copy.deepcopy(claim), tolerant, renamed]


def outcome(static: object) -> object:
    """What a kept outcome is, comparable across stores: a marker, or a problem's
    arrays and result names."""
    if isinstance(static, compiled.Problem):
        return ("problem", bytes(static.packed), tuple(static.header), static.names,
                static.baked)
    return static


def asked(case: dict[str, Any], kept: Kept) -> list[tuple[object, object]]:
    """Each variant of the case's claims asked in turn through `kept` (patched into
    fitcore.compiled for api.allocate), in a store of its own: the kept outcome, and the
    answer."""
    inventory = kube.inventory(case["slices"], case["classes"], [])
    node = kube.node(case["node"])
    per_claim = [variants(c, i) for i, c in enumerate(case["claims"])]
    out: list[tuple[object, object]] = []
    saved = compiled.kept
    compiled.kept = kept  # type: ignore[assignment]
    try:
        with cache.use(cache.Store()):
            for v in range(4):
                claims = [kube.resource_claim(c[v]) for c in per_claim]
                nd = cache.for_slices(inventory.slices).devices_for(node)
                static = kept(node, inventory, claims, nd, api._compile_static,
                              compiled.Unsupported)
                fit = api.allocate(node, inventory, claims, engine="c")
                out.append((outcome(static), fit))
    finally:
        compiled.kept = saved  # type: ignore[assignment]
    return out


def same_as_reference(case: dict[str, Any]) -> None:
    assert asked(case, _call.kept) == asked(case, compiled._kept)


@pytest.mark.timeout(900)
@settings(max_examples=min(EXAMPLES, 500), derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_compiled_kept_is_the_reference(seed: int) -> None:
    same_as_reference(testing.case(seed))


def test_a_new_template_that_walks_alike_is_kept_without_compiling() -> None:
    """A template that differs only in a toleration of a taint no device has: the
    compiled look-up keeps the problem the node holds under the walk's key, and does
    not call `compile`; the reference calls it (which finds the same problem)."""
    inventory = kube.inventory([b.rslice("s", b.gpus(4))], [b.gpu_class()], [])
    node = kube.node(b.node())
    claim, _, tolerant, _ = variants(b.claim("c", b.req("g", count=2)), 0)
    calls: list[object] = []

    def compile(*args: Any) -> object:
        calls.append(args[-1])
        return api._compile_static(*args)

    with cache.use(cache.Store()):
        nd = cache.for_slices(inventory.slices).devices_for(node)
        first = [kube.resource_claim(claim)]
        problem = _call.kept(node, inventory, first, nd, compile, compiled.Unsupported)
        assert isinstance(problem, compiled.Problem) and calls == [None]  # arrays unmade
        second = [kube.resource_claim(tolerant)]
        assert _call.kept(node, inventory, second, nd, compile,
                          compiled.Unsupported) is problem
        assert len(calls) == 1 and len(nd.problems) == 2
        assert compiled._kept(node, inventory, [kube.resource_claim(tolerant)], nd, compile,
                              compiled.Unsupported) is problem  # kept: no call either
        assert len(calls) == 1
        third = [kube.resource_claim(variants(claim, 1)[2])]
        assert compiled._kept(node, inventory, third, nd, compile,
                              compiled.Unsupported) is problem
        assert calls[-1] is None and len(nd.problems) == 3


def test_a_walk_of_other_names_is_handed_to_compile() -> None:
    """Other request names walk to a key the node holds with other result names: the
    walk goes to `compile`, which makes a renamed problem over the same arrays."""
    inventory = kube.inventory([b.rslice("s", b.gpus(2))], [b.gpu_class()], [])
    node = kube.node(b.node())
    claim, _, _, renamed = variants(b.claim("c", b.req("g")), 0)
    calls: list[object] = []

    def compile(*args: Any) -> object:
        calls.append(args[-1])
        return api._compile_static(*args)

    with cache.use(cache.Store()):
        nd = cache.for_slices(inventory.slices).devices_for(node)
        first = _call.kept(node, inventory, [kube.resource_claim(claim)], nd, compile,
                           compiled.Unsupported)
        other = _call.kept(node, inventory, [kube.resource_claim(renamed)], nd, compile,
                           compiled.Unsupported)
        assert isinstance(calls[-1], tuple)  # the walk, handed over
        assert isinstance(other, compiled.Problem) and isinstance(first, compiled.Problem)
        assert other is not first and other.packed is first.packed
        assert other.names == ("g-n0",)


def test_kept_problems_stay_within_the_store_bound() -> None:
    """The compiled keep evicts as cache.NodeDevices.keep_problem does: the oldest
    contents go past the store's bound, the newest stay."""
    inventory = kube.inventory([b.rslice("s", b.gpus(2))], [b.gpu_class()], [])
    node = kube.node(b.node())
    claim = b.claim("c", b.req("g"))
    with cache.use(cache.Store(kept_problems=3)):
        nd = cache.for_slices(inventory.slices).devices_for(node)
        contents = []
        for i in range(5):
            claims = [kube.resource_claim(variants(claim, i)[2])]
            _call.kept(node, inventory, claims, nd, api._compile_static, compiled.Unsupported)
            contents.append((id(inventory.classes), compiled.content_key(claims)))
        assert list(nd.problems) == contents[2:]
        assert len(nd.store.kept) == 3


def test_the_reference_engine_answers_without_extensions() -> None:
    """With FITCORE_NO_EXTENSIONS=1 fitcore.compiled falls back to the reference look-up
    and allocate answers with the reference engine, as the compiled one does here."""
    claims = [kube.resource_claim(b.claim("c", b.req("g", count=2)))]
    inventory = kube.inventory([b.rslice("s", b.gpus(4))], [b.gpu_class()], [])
    node = kube.node(b.node())
    here = api.allocate(node, inventory, claims)
    script = (
        "from fitcore import api, compiled, kube\n"
        "from tests.fitcore import builders as b\n"
        "assert not api.compiled_available()\n"
        "claims = [kube.resource_claim(b.claim('c', b.req('g', count=2)))]\n"
        "inventory = kube.inventory([b.rslice('s', b.gpus(4))], [b.gpu_class()], [])\n"
        "fit = api.allocate(kube.node(b.node()), inventory, claims)\n"
        "print(fit.verdict, [r.id.device for r in fit.allocations[0]])\n")
    env = {**os.environ, "FITCORE_NO_EXTENSIONS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, check=True, timeout=120)
    assert done.stdout.split() == [here.verdict, *str(
        [r.id.device for r in here.allocations[0]]).split()]
    assert isinstance(here, model.NodeFit) and here.engine == "c"
