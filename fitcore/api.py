"""fitcore's public entry points.

`allocate` answers the per-node question the scheduler's DRA plugin answers in Filter:
can this pod's claims be allocated on this node, given what is already allocated? Two
engines give the same answers: the compiled core (`engine="c"`, the default) and the
plain-Python reference (`engine="py"`). Set FITCORE_NO_EXTENSIONS=1 to run without the
compiled core (the reference answers everything).
"""

from __future__ import annotations

import array
import os
from collections.abc import Sequence
from typing import Any, Literal

from fitcore import cache, compiled, explain, model, reference, versions

Engine = Literal["auto", "c", "py"]
DEFAULT_BUDGET = reference.DEFAULT_BUDGET

_NO_EXTENSIONS = os.environ.get("FITCORE_NO_EXTENSIONS", "") not in ("", "0")

_alloc: Any
_call: Any
if _NO_EXTENSIONS:
    _alloc = _call = None
else:
    try:
        from fitcore import _alloc, _call
    except ImportError as exc:  # pragma: no cover - exercised by a packaging test
        raise ImportError(
            "fitcore's compiled core (fitcore._alloc) is not built. Build it with "
            "`pip install -e .` (or `make setup`) from the repository root, or set "
            "FITCORE_NO_EXTENSIONS=1 to use the slower pure-Python reference engine."
        ) from exc


def compiled_available() -> bool:
    return _alloc is not None


def allocate(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim],
             *, engine: Engine = "auto", budget: int = DEFAULT_BUDGET,
             kube: versions.KubeVersion = versions.DEFAULT,
             with_reasons: bool = True) -> model.NodeFit:
    """Whether one pod's `claims` can be allocated on `node` now, with one allocation,
    as the default-feature allocator of Kubernetes `kube` (1.36 or 1.37) answers.

    `budget` bounds the search steps; when it runs out the verdict is `undecided`.
    `with_reasons=False`: a `no-fit` of the compiled core comes without reasons (a caller
    that may never read them asks `no_fit_reasons` when it does).
    """
    if engine == "py" or (engine == "auto" and _alloc is None):
        return reference.allocate(node, inventory, claims, budget=budget, kube=kube)
    if _alloc is None:
        raise RuntimeError("engine='c' requested but fitcore was imported with "
                           "FITCORE_NO_EXTENSIONS=1")
    # The compiled core follows 1.36's capacity rules; where 1.37's differ (shared,
    # consumable-capacity devices), the reference answers.
    # (`is` first: comparing two KubeVersions calls their dataclass __eq__.)
    found = None if kube is not versions.V1_36 and kube != versions.V1_36 and \
        _differs_by_version(inventory, claims) else _compile(node, inventory, claims)
    if isinstance(found, reference.ClaimError):
        return model.NodeFit("error", node.name, reasons=(str(found),), engine="c")
    if found is None:
        fit = reference.allocate(node, inventory, claims, budget=budget, kube=kube)
        return model.NodeFit(fit.verdict, fit.node, fit.allocations, fit.reasons, fit.steps,
                             engine="c->py")
    problem, state = found
    if problem.native is None:
        problem.native = _alloc.Compiled(problem.packed, problem.header)
    status, steps, results = _alloc.search(problem.native, state, budget)
    if status == 1:
        if len(problem.claims) == 1:  # the common case, answered in the compiled core
            return _call.fits(  # type: ignore[no-any-return]
                problem.made, results, node.name, steps, problem.result)
        return model.NodeFit("fits", node.name, problem.results(results), steps=steps,
                             engine="c")
    if status < 0:
        return model.NodeFit("undecided", node.name, steps=steps, engine="c", reasons=(
            f"the search took more than {budget} steps on node {node.name}",))
    if not with_reasons:
        return model.NodeFit("no-fit", node.name, steps=steps, engine="c")
    # The problem may have been compiled for other claims of the same content: explain
    # with these claims' names and this allocated state.
    prepared = problem.prepared if problem.baked else reference.prepare(node, inventory, claims)
    return model.NodeFit("no-fit", node.name, reasons=explain.no_fit(prepared), steps=steps,
                         engine="c")


def no_fit_reasons(node: model.Node, inventory: model.Inventory,
                   claims: Sequence[model.Claim]) -> tuple[str, ...]:
    """Why `claims` cannot be allocated on `node` (the reasons `allocate` gives with a
    `no-fit`)."""
    return explain.no_fit(reference.prepare(node, inventory, claims))


_SHARED: dict[int, tuple[object, bool]] = {}


def _differs_by_version(inventory: model.Inventory, claims: Sequence[model.Claim]) -> bool:
    """Whether the question involves what 1.36 and 1.37 allocate differently: devices
    that allow multiple allocations, or capacity requests."""
    if any(alt.capacity_requests for c in claims for r in c.requests
           for alt in r.alternatives):
        return True
    have = _SHARED.get(id(inventory.slices))
    if have is None or have[0] is not inventory.slices:
        if len(_SHARED) > 64:
            _SHARED.clear()
        have = _SHARED[id(inventory.slices)] = (inventory.slices, any(
            d.allow_multiple_allocations for s in inventory.slices for d in s.devices))
    return have[1]


_REFERENCE = "reference"  # the compiled core does not take these claims
_BAKED = "baked"  # compile with the allocated state built in (see compiled.Problem)
_EMPTY = model.AllocatedState()


def _compile(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim]
             ) -> tuple[compiled.Problem, array.array[int]] | reference.ClaimError | None:
    """The compiled problem and state array for this question (None: the compiled core
    does not take it).

    A problem is compiled once per node and claim content, without allocated state, and
    kept (`cache.NodeDevices.problems`); each call applies its allocated state to it. The
    few questions whose state cannot be applied that way are compiled with the state
    built in, and remembered under the identities of their (immutable) inputs.
    """
    entry = cache.for_slices(inventory.slices)
    node_devices = entry.devices_for(node)
    # Kept by the classes' id and the claims' content, with the classes (which keep the
    # id valid); on a miss _compile_static makes it.
    static = compiled.kept(node, inventory, claims, node_devices, _compile_static,
                           compiled.Unsupported)
    if static == _REFERENCE:
        return None
    if isinstance(static, compiled.Problem):
        state = static.state(inventory.allocated)
        if state is not None:
            return static, state
    # _BAKED, or a state the kept problem cannot take: compile with the state built in.
    key = (node.name, id(node), id(inventory.allocated), id(inventory.classes),
           *(id(c) for c in claims))
    found = entry.recall(key)
    if found is None:
        found = _compile_baked(node, inventory, claims)
        entry.remember(key, (node, inventory.allocated, inventory.classes, *claims), found)
    if isinstance(found, compiled.Problem):
        state = found.state(inventory.allocated)
        assert state is not None  # a baked problem takes the state it was compiled with
        return found, state
    return found if isinstance(found, reference.ClaimError) else None


def _compile_static(node: model.Node, inventory: model.Inventory,
                    claims: Sequence[model.Claim], node_devices: cache.NodeDevices,
                    walked: compiled.Walked | None = None) -> compiled.Problem | str:
    try:
        # Claims of the common form skip reference.prepare (the same problem, made
        # from the node's kept bitsets); the rest, and every error, take the full path.
        # `walked`: their walk, when compiled.kept has made it.
        common = compiled.Problem.common_or_same(node, inventory, claims,
                                                 node_devices, walked)
        if common is not None:
            return common
        empty = model.Inventory(inventory.slices, inventory.classes, _EMPTY)
        return compiled.Problem(reference.prepare(node, empty, claims))
    except reference.ClaimError:
        return _BAKED  # maybe not an error in this state: prepare with it, every time
    except compiled.Unsupported:
        return _REFERENCE


def _compile_baked(node: model.Node, inventory: model.Inventory,
                   claims: Sequence[model.Claim]) -> compiled.Problem | reference.ClaimError | str:
    try:
        return compiled.Problem(reference.prepare(node, inventory, claims), baked=True)
    except reference.ClaimError as exc:
        return exc
    except compiled.Unsupported:
        return _REFERENCE
