"""fitcore's public entry points.

`allocate` answers the per-node question the scheduler's DRA plugin answers in Filter:
can this pod's claims be allocated on this node, given what is already allocated? Two
engines give the same answers: the compiled core (`engine="c"`, the default) and the
plain-Python reference (`engine="py"`). Set FITCORE_NO_EXTENSIONS=1 to run without the
compiled core (the reference answers everything).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

from fitcore import cache, compiled, explain, model, reference

Engine = Literal["auto", "c", "py"]
DEFAULT_BUDGET = reference.DEFAULT_BUDGET

_NO_EXTENSIONS = os.environ.get("FITCORE_NO_EXTENSIONS", "") not in ("", "0")

_alloc: Any
if _NO_EXTENSIONS:
    _alloc = None
else:
    try:
        from fitcore import _alloc
    except ImportError as exc:  # pragma: no cover - exercised by a packaging test
        raise ImportError(
            "fitcore's compiled core (fitcore._alloc) is not built. Build it with "
            "`pip install -e .` (or `make setup`) from the repository root, or set "
            "FITCORE_NO_EXTENSIONS=1 to use the slower pure-Python reference engine."
        ) from exc


def compiled_available() -> bool:
    return _alloc is not None


def allocate(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim],
             *, engine: Engine = "auto", budget: int = DEFAULT_BUDGET) -> model.NodeFit:
    """Whether one pod's `claims` can be allocated on `node` now, with one allocation.

    `budget` bounds the search steps; when it runs out the verdict is `undecided`.
    """
    if engine == "py" or (engine == "auto" and _alloc is None):
        return reference.allocate(node, inventory, claims, budget=budget)
    if _alloc is None:
        raise RuntimeError("engine='c' requested but fitcore was imported with "
                           "FITCORE_NO_EXTENSIONS=1")
    problem = _compile(node, inventory, claims)
    if isinstance(problem, reference.ClaimError):
        return model.NodeFit("error", node.name, reasons=(str(problem),), engine="c")
    if problem is None:
        fit = reference.allocate(node, inventory, claims, budget=budget)
        return model.NodeFit(fit.verdict, fit.node, fit.allocations, fit.reasons, fit.steps,
                             engine="c->py")
    prepared = problem.prepared
    if problem.native is None:
        problem.native = _alloc.Compiled(problem.packed, problem.header)
    status, steps, res_alt, res_dev = _alloc.search(problem.native, budget)
    if status == 1:
        return model.NodeFit("fits", node.name, problem.results(res_alt, res_dev),
                             steps=steps, engine="c")
    if status < 0:
        return model.NodeFit("undecided", node.name, steps=steps, engine="c", reasons=(
            f"the search took more than {budget} steps on node {node.name}",))
    return model.NodeFit("no-fit", node.name, reasons=explain.no_fit(prepared), steps=steps,
                         engine="c")


def _compile(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim]
             ) -> compiled.Problem | reference.ClaimError | None:
    """The compiled problem for this question (None: the compiled core does not take it).

    A compiled problem is a pure function of the node, the slices, the classes, the
    allocated state and the claims, all immutable: it is remembered under their
    identities, so asking the same question again only runs the search.
    """
    entry = cache.for_slices(inventory.slices)
    key = (node.name, id(node), id(inventory.allocated), id(inventory.classes),
           *(id(c) for c in claims))
    found = entry.recall(key)
    if found is not None:
        return found if not isinstance(found, str) else None  # type: ignore[return-value]
    outcome: compiled.Problem | reference.ClaimError | str
    try:
        outcome = compiled.Problem(reference.prepare(node, inventory, claims))
    except reference.ClaimError as exc:
        outcome = exc
    except compiled.Unsupported:
        outcome = "unsupported"
    entry.remember(key, (node, inventory.allocated, inventory.classes, *claims), outcome)
    return outcome if not isinstance(outcome, str) else None
