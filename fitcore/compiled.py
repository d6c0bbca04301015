"""Facade over the compiled search (`fitcore._alloc`): flattens a prepared problem into
integer arrays and calls in.

A question has three parts that change at different rates, and each is flattened once:
- the node (`NodeArrays`, kept per node in `fitcore.cache`): its devices in allocator
  order, their pools, the pools' shared counters and every device that consumes them;
- the claims' content (`Problem`, kept per node and claim content): alternatives, their
  candidate *classes* — devices identical for this problem (same pool, counters,
  candidacy for every alternative, value of every constrained attribute) are
  interchangeable, so the search picks a multiset of classes instead of a set of devices,
  which is exact symmetry breaking — constraints and interned attribute values;
- the allocated state (`Problem.state`, per call): devices in use, counters and capacity
  left. A new pod from a known template, or a node whose allocations changed, costs only
  this part and the search.

A never-seen claim content of the common form (every alternative ExactCount, no
adminAccess; `Problem.common`) is compiled without `reference.prepare`: the node keeps,
as device bitsets, what each selector list selects and each capacity request can serve
(`NodeArrays`), and the compiled core builds the device classes, class lists and the
packed buffer (`_alloc.device_classes`, `_alloc.pack`). It gives the same arrays as the
full path, whose Python code stays the reference (tests/fitcore/test_common_problems.py).

The per-call path over the claims runs compiled too (`fitcore._call`; the Python
`_content_key`, `_walk`, `_kept` and `Problem.results` are its reference,
tests/fitcore/test_call_path.py and test_kept_path.py): the content key a kept problem
is found by, the walk that reads a never-seen content's candidacy off the node's
bitsets, keeping what it finds under the content (`kept`), and the answer of a fit.
The walk ends in a key of everything the compiled arrays are made of (candidacy, counts,
capacity takes, the alternatives each constraint covers); a node keeps the problems
`common` made under that key while they are kept anywhere (`NodeArrays.same`, weak
references), so a claim content that differs from one asked before only in what
the node does not read (claim names, tolerations of taints none of its devices has) gets
that problem (`Problem.common_or_same`) instead of compiling its own; one that differs in
request names too gets a problem of its own over the same arrays and bound core, with
its own alternatives, result names and results (`Problem.renamed`). The allocated state
of a call is applied in the compiled core too (`_call.state`; `Problem._make_state` is
its reference).

What the arrays encode field by field is in `_alloc.pxd`. Counters are scaled integers
(each counter's quantities share one exact scale); attribute values are interned to
integers (type-tagged, so "1" != 1).

Inputs the compiled core does not take are answered by the reference engine: requests
with adminAccess; `All` requests under a claim constraint (upstream's answer then depends
on its search order, which the reference follows); quantities too large to scale exactly
into 62 bits. A few allocated states cannot be applied to a problem compiled without them
(a device of an `All` request already shared, a dedicated device with consumed capacity,
a consumed amount finer than the compiled scale): those questions are compiled with the
state built in (`Problem(prepared, baked=True)`).
"""

from __future__ import annotations

import array
import itertools
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, TypeVar

from fitcore import cache, model, reference, semantics, values

_alloc: Any
_call: Any
try:
    from fitcore import _alloc, _call
except ImportError:  # fitcore.api says how to build it, or runs the reference alone
    _alloc = _call = None

_LIMIT = 2**62
_K = TypeVar("_K")
_V = TypeVar("_V")


class Unsupported(Exception):
    """The compiled core cannot take this input; the reference engine answers instead."""


def _representable(exact: model.ExactRequest, nd: cache.NodeDevices) -> None:
    """Raise Unsupported when `exact`'s capacity request cannot be rounded on one of the
    node's devices (`semantics.capacity_unrepresentable`): the reference engine answers
    then, with the error upstream gives when its search reaches such a device."""
    if exact.capacity_requests and any(
            semantics.capacity_unrepresentable(exact, device) is not None
            for _, device, _ in nd.devices):
        raise Unsupported("a capacity request that cannot be rounded in 64-bit integers")


def _scale(amounts: Sequence[Fraction]) -> int:
    scale = 1
    for a in amounts:
        scale = math.lcm(scale, a.denominator)
    return scale


def _scaled(amount: Fraction, scale: int) -> int:
    """`amount * scale`, exactly; `scale` is a multiple of the amount's denominator."""
    v = amount.numerator * (scale // amount.denominator)  # ints: far cheaper than Fraction
    if abs(v) >= _LIMIT:
        raise Unsupported("quantity too large for exact 62-bit arithmetic")
    return v


def _q(n: int = 0) -> array.array[int]:
    return array.array("q", [0] * n)


#: Per node, at most this many kept results of each kind (expressions, selector lists,
#: capacity requests, attributes) for `Problem.common`; the oldest goes first.
_KEPT_PER_NODE = 256


#: Per node, at most this many results of dedicated devices kept (then all are dropped).
_RESULTS_PER_NODE = 4096

_NONE: array.array[int] = array.array("q")


def _keep(kept: dict[_K, _V], key: _K, value: _V) -> _V:
    if len(kept) >= _KEPT_PER_NODE:
        del kept[next(iter(kept))]
    kept[key] = value
    return value


def _content_key(claims: Sequence[model.Claim]) -> tuple[object, ...]:
    """What allocation reads of the claims: requests and constraints, not names. Two pods
    made from one template ask the same question. Built of str, int and tuple only, so
    that hashing and comparing it stays in C. Compiled (`_call.content_key`); this is
    the reference."""
    key: list[tuple[object, ...]] = []
    for c in claims:
        requests: list[tuple[object, ...]] = []
        for r in c.requests:
            if r.exactly is not None:
                requests.append((r.name, _exact_key(r.exactly)))
            else:
                requests.append((r.name, None, *[_exact_key(e) for e in r.first_available]))
        constraints = [(k.requests, k.match_attribute, k.distinct_attribute)
                       for k in c.constraints] if c.constraints else ()
        key.append((*requests, tuple(constraints)))
    return tuple(key)


def capacity_key(requests: Mapping[str, values.Quantity] | None) -> tuple[object, ...]:
    """A capacity request by value, in ints: what `NodeArrays.capacity` and
    `.representable` keep their results by (hashing a fresh Quantity hashes a Fraction,
    which costs a pow). `_call.walk` makes the same key."""
    if not requests:
        return ()
    return tuple(sorted([(name, q.value.numerator, q.value.denominator)
                         for name, q in requests.items()]))


def _python_device_result(request: str, ident: model.DeviceId, shared: bool = False,
                          consumed: Mapping[str, values.Quantity] | None = None
                          ) -> model.DeviceResult:
    """A result; `_call.device_result` makes the same object faster."""
    return model.DeviceResult(request, ident, shared=shared,
                              consumed_capacity={} if consumed is None else consumed)


_device_result: Callable[..., model.DeviceResult] = \
    _call.device_result if _call is not None else _python_device_result


#: `_content_key`, in the compiled core when it is built.
content_key: Callable[[Sequence[model.Claim]], tuple[object, ...]] = \
    _call.content_key if _call is not None else _content_key


def _kept(node: model.Node, inventory: model.Inventory, claims: Sequence[model.Claim],
          node_devices: cache.NodeDevices, compile: Callable[..., object],
          unsupported: type[Exception]) -> object:
    """What the node keeps for the claims' content (`node_devices.problems`, by the
    classes' identity and `content_key`): a compiled problem or a marker of fitcore.api
    saying how else to answer, made on a miss by `compile(node, inventory, claims,
    node_devices, walked)` and kept. Compiled (`_call.kept`, which on a miss walks the
    claims first and keeps a problem the node holds under the walk's key without calling
    `compile`); this is the reference (tests/fitcore/test_kept_path.py). `unsupported`
    is what the walk raises for a capacity request it cannot round (`compile` answers
    it)."""
    content = (id(inventory.classes), content_key(claims))
    found = node_devices.problems.get(content)
    if found is not None:
        return found[1]
    static = compile(node, inventory, claims, node_devices, None)
    node_devices.keep_problem(content, (inventory.classes, static))
    return static


#: `_kept`, in the compiled core when it is built.
kept: Callable[[model.Node, model.Inventory, Sequence[model.Claim], cache.NodeDevices,
                Callable[..., object], type[Exception]], object] = \
    _call.kept if _call is not None else _kept


def _exact_key(e: model.ExactRequest) -> tuple[object, ...]:
    capacity = tuple(sorted([(name, q.value.numerator, q.value.denominator)
                             for name, q in e.capacity_requests.items()])
                     ) if e.capacity_requests else None
    tolerations = tuple([(t.key, t.operator, t.value, t.effect) for t in e.tolerations]
                        ) if e.tolerations else ()
    return (e.name, e.device_class, e.selectors, e.allocation_mode, e.count, e.admin_access,
            tolerations, capacity, e.derived_attributes)


class NodeArrays:
    """The node's devices and shared counters, flattened; no claims, no allocated state."""

    def __init__(self, nd: cache.NodeDevices) -> None:
        self.ids = [ident for _, _, ident in nd.devices]
        self.multi = [device.allow_multiple_allocations for _, device, _ in nd.devices]
        self.shared = [d for d, m in enumerate(self.multi) if m]  # allowMultipleAllocations
        self.n_dev = len(nd.devices)
        self.n_pools = len(nd.pool_ids)
        self.dev_pool = array.array("q", [nd.pool_ids[(pool.driver, pool.name)]
                                          for pool, _, _ in nd.devices])
        self.dev_multi = array.array("q", [1 if m else 0 for m in self.multi])
        # Counters of the usable pools; each counter's scale covers its total and what
        # every device of the pool (here or on other nodes) consumes of it, so any
        # allocated state subtracts exactly.
        counter_ids: dict[tuple[int, str, str], int] = {}
        totals: list[Fraction] = []
        self.ctr_pool: list[int] = []
        users: list[tuple[model.DeviceId, list[tuple[int, Fraction]]]] = []
        for pool in nd.usable_pools:
            if not pool.counter_sets:
                continue
            pi = nd.pool_ids[(pool.driver, pool.name)]
            for set_name, counters in pool.counter_sets.items():
                for counter, amount in counters.items():
                    counter_ids[(pi, set_name, counter)] = len(totals)
                    totals.append(amount.value)
                    self.ctr_pool.append(pi)
            for device in [d for _, d in pool.devices] + pool.other_devices:
                uses = [(counter_ids[(pi, use.counter_set, counter)], q.value)
                        for use in device.consumes_counters
                        for counter, q in use.counters.items()]
                if uses:
                    users.append((model.DeviceId(pool.driver, pool.name, device.name), uses))
        per_counter: list[list[Fraction]] = [[t] for t in totals]
        for _, uses in users:
            for cid, fraction in uses:
                per_counter[cid].append(fraction)
        scales = [_scale(vs) for vs in per_counter]
        self.ctr_total = [_scaled(t, scales[i]) for i, t in enumerate(totals)]
        #: Devices that consume counters, with their scaled consumption.
        self.counter_users = [(ident, [(cid, _scaled(a, scales[cid])) for cid, a in uses])
                              for ident, uses in users]
        by_id = dict(self.counter_users)
        dev_ctr_start = [0]
        ctr_id: list[int] = []
        ctr_amt: list[int] = []
        #: Per device, its scaled consumption as a hashable value (for the classes).
        self.uses: list[tuple[tuple[int, int], ...]] = []
        for ident in self.ids:
            mine = by_id.get(ident, [])
            self.uses.append(tuple(mine))
            ctr_id.extend(cid for cid, _ in mine)
            ctr_amt.extend(amt for _, amt in mine)
            dev_ctr_start.append(len(ctr_id))
        self.dev_ctr_start = array.array("q", dev_ctr_start)
        self.ctr_id = array.array("q", ctr_id)
        self.ctr_amt = array.array("q", ctr_amt)
        self._devices = nd.devices
        self._attribute_keys: dict[str, list[tuple[str, object] | None]] = {}
        # What `Problem.common` reads of the node, made once: per device a base class
        # (pool and counter consumption; each shared device its own), the devices with
        # taints and those with capacity or allowMultipleAllocations (the only ones a
        # toleration or a capacity request can tell apart), and bounded kept results
        # (`_KEPT_PER_NODE`) of selectors and capacity requests as device bitsets.
        bases: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}
        self.base = array.array("q", [
            self.n_dev + d if m else bases.setdefault((self.dev_pool[d], self.uses[d]),
                                                      len(bases))
            for d, m in enumerate(self.multi)])
        self.every = (1 << self.n_dev) - 1
        self.tainted = [d for d, (_, device, _) in enumerate(nd.devices) if device.taints]
        self.sized = [d for d, (_, device, _) in enumerate(nd.devices)
                      if device.capacity or device.allow_multiple_allocations]
        self._unsized = self.every & ~sum(1 << d for d in self.sized)
        self._selector = nd.selector
        self._expressions: dict[str, tuple[int, int]] = {}
        self._selections: dict[tuple[str, ...], tuple[int, int]] = {}
        self._capacities: dict[object, tuple[int, dict[int, dict[str, values.Quantity]],
                                             int]] = {}
        self._serials = itertools.count()
        self._representable: dict[object, bool] = {}
        #: Problems `Problem.common` made, by what they are made of (`_Walk.key`), while
        #: something else holds them (weak references, dropped with the problem).
        self.same: dict[object, weakref.ref[Problem]] = {}
        self.shared_bits = sum(1 << d for d in self.shared)
        #: (dev_cap_start, take_off, take_vals, cap_total, cap_slots, empty state) by
        #: what the shared devices' slots depend on (Problem._shared_slots).
        self.slot_sets: dict[object, list[Any]] = {}
        self._attribute_ids: dict[str, tuple[array.array[int], int]] = {}
        self._empty_state: array.array[int] | None = None
        self._dedicated_results: dict[tuple[str, int], model.DeviceResult] = {}
        self._slots: dict[object, tuple[list[tuple[str, int]], list[int], list[list[int]]]] = {}
        #: A node without shared devices: no capacity slots.
        self.no_slot_starts = _q(self.n_dev + 1)
        self.no_slots: list[list[tuple[str, int, int]]] = [[] for _ in range(self.n_dev)]

    def attribute_keys(self, attribute: str) -> list[tuple[str, object] | None]:
        """Per device, the comparable key of its value of `attribute` (None: it has none)."""
        found = self._attribute_keys.get(attribute)
        if found is None:
            found = self._attribute_keys[attribute] = []
            for pool, device, _ in self._devices:
                value = semantics.lookup_attribute(pool.driver, device, attribute)
                found.append(None if value is None else semantics.attribute_key(value))
        return found

    def attribute_ids(self, attribute: str) -> tuple[array.array[int], int]:
        """Per device, its value of `attribute` interned in device order (-1: none),
        and how many values there are: what Problem._constraints gives one constraint."""
        found = self._attribute_ids.get(attribute)
        if found is None:
            interned: dict[tuple[str, object], int] = {}
            ids = array.array("q", [-1 if k is None else interned.setdefault(k, len(interned))
                                    for k in self.attribute_keys(attribute)])
            found = _keep(self._attribute_ids, attribute, (ids, len(interned)))
        return found

    def selection(self, expressions: tuple[str, ...]) -> tuple[int, int]:
        """Bitsets of the devices (bit d: device d) that `expressions`, evaluated in order
        as semantics.device_selectable does, select, and of those on which one fails at
        runtime before any is false."""
        found = self._selections.get(expressions)
        if found is None:
            selected, failing = self.every, 0
            for expression in expressions:
                true, fails = self._expression(expression)
                failing |= selected & fails
                selected &= true
            found = _keep(self._selections, expressions, (selected, failing))
        return found

    def _expression(self, expression: str) -> tuple[int, int]:
        found = self._expressions.get(expression)
        if found is None:
            true = fails = 0
            for d, (pool, device, _) in enumerate(self._devices):
                try:
                    if self._selector.matches((expression,), pool.driver, device, ""):
                        true |= 1 << d
                except semantics.SelectionError:
                    fails |= 1 << d
            found = _keep(self._expressions, expression, (true, fails))
        return found

    def blocked(self, exact: model.ExactRequest) -> int:
        """Bitset of the devices whose taints `exact` does not tolerate."""
        out = 0
        for d in self.tainted:
            if not semantics.taint_allows(self._devices[d][1], exact):
                out |= 1 << d
        return out

    def capacity(self, exact: model.ExactRequest
                 ) -> tuple[int, dict[int, dict[str, values.Quantity]], int]:
        """Bitset of the devices that can serve `exact`'s capacity request (a dedicated
        device holding all of it), what each shared one of them would take, and a
        number naming this outcome on this node (never reused)."""
        requests = exact.capacity_requests
        key = capacity_key(requests)
        found = self._capacities.get(key)
        if found is None:
            fits = 0 if requests else self._unsized
            takes: dict[int, dict[str, values.Quantity]] = {}
            for d in self.sized:
                device = self._devices[d][1]
                take = semantics.capacity_take(exact, device)
                if take is None:
                    continue
                if device.allow_multiple_allocations:
                    takes[d] = take
                elif not semantics.capacity_fits(device, take):
                    continue
                fits |= 1 << d
            found = _keep(self._capacities, key, (fits, takes, next(self._serials)))
        return found

    def keep_same(self, key: object, problem: Problem) -> None:
        """Enter `problem` in `same` under `key` until it is no longer used elsewhere."""
        same = self.same

        def drop(ref: weakref.ref[Problem]) -> None:
            if same.get(key) is ref:
                del same[key]
        same[key] = weakref.ref(problem, drop)

    def representable(self, exact: model.ExactRequest) -> bool:
        """Whether `exact`'s capacity request can be rounded on every device of the node
        (see `_representable`), kept per capacity request."""
        requests = exact.capacity_requests
        key = capacity_key(requests)
        found = self._representable.get(key)
        if found is None:
            found = _keep(self._representable, key, not any(
                semantics.capacity_unrepresentable(exact, device) is not None
                for _, device, _ in self._devices))
        return found

    def shared_slots(self, d: int, takes: list[dict[str, values.Quantity]]
                     ) -> tuple[list[tuple[str, int]], list[int], list[list[int]]]:
        """Shared device d's capacity slots, for alternatives that take `takes` of it:
        (per slot its capacity name and scale, its total, per take its scaled amounts),
        as Problem._capacity_slots computes them for an empty state."""
        key = (d, tuple(tuple(take.items()) for take in takes))
        found = self._slots.get(key)
        if found is None:
            device = self._devices[d][1]
            names: list[tuple[str, int]] = []
            totals: list[int] = []
            for name in sorted(device.capacity):
                total = device.capacity[name].value.value
                scale = _scale([total, *[take[name].value for take in takes]])
                names.append((name, scale))
                totals.append(_scaled(total, scale))
            scaled = [[_scaled(take[name].value, scale) for name, scale in names]
                      for take in takes]
            found = _keep(self._slots, key, (names, totals, scaled))
        return found

    def dedicated_result(self, request: str, d: int) -> model.DeviceResult:
        """The result of dedicated device d for `request`, made once per node (a new
        template allocates no new result objects)."""
        key = (request, d)
        found = self._dedicated_results.get(key)
        if found is None:
            if len(self._dedicated_results) >= _RESULTS_PER_NODE:
                self._dedicated_results.clear()
            found = self._dedicated_results[key] = _device_result(request, self.ids[d])
        return found

    def empty_state(self) -> array.array[int]:
        """The empty-cluster state of a problem without capacity slots."""
        if self._empty_state is None:
            state = array.array("q", [0] * (2 * self.n_dev))
            state.extend(self.ctr_total)
            pool_bad = _q(self.n_pools)
            for cid, total in enumerate(self.ctr_total):
                if total < 0:
                    pool_bad[self.ctr_pool[cid]] = 1
            state.extend(pool_bad)
            self._empty_state = state
        return self._empty_state

    @classmethod
    def of(cls, nd: cache.NodeDevices) -> NodeArrays:
        if nd.arrays is None:
            nd.arrays = cls(nd)
        assert isinstance(nd.arrays, NodeArrays)
        return nd.arrays


_EMPTY = model.AllocatedState()


#: What `walk` gives: (key, found, bits, alt_claim, alt_count, req_alt_start,
#: claim_req_start, slot_key, takes, names, shared), see `_walk`.
Walked = tuple[Any, ...]


def _walk(node_arrays: NodeArrays, classes: Mapping[str, model.DeviceClass],
          claims: Sequence[model.Claim]) -> Walked | None:
    """What `Problem.common` reads off claims of the common form on the node, from its
    kept bitsets, before anything is compiled; None when they are not of that form.
    Compiled (`_call.walk`, what `Problem.common` calls); this is the reference.

    Per alternative: `found` (claim index, request, ExactRequest, device class, result
    name), `bits` its candidate devices (bit d: device d), `alt_claim`, `alt_count`;
    where each request's alternatives and each claim's requests start; `slot_key` (per
    alternative that may take a shared device: the alternative, its capacity outcome,
    the shared devices it may take) and `takes` (what it takes of each); `names`, the
    result name of each alternative; `shared` (always None here: `_call.walk` fills it
    from `NodeArrays.same`). `key` is everything the compiled arrays are made of —
    candidacy, counts, capacity takes, which alternatives each constraint covers — and
    not the claims' or requests' names nor what the node does not read (tolerations of
    taints no device has): claims that differ only there share the arrays
    (`Problem.renamed`), each with its own result names.
    """
    tainted, shared_bits = node_arrays.tainted, node_arrays.shared_bits
    found: list[tuple[int, model.DeviceRequest, model.ExactRequest, model.DeviceClass,
                      str]] = []
    bits: list[int] = []
    alt_claim: list[int] = []
    alt_count: list[int] = []
    req_alt_start = [0]
    claim_req_start = [0]
    slot_key: list[tuple[int, int, int]] = []
    takes: dict[tuple[int, int], dict[str, values.Quantity]] = {}
    names: list[str] = []
    for ci, claim in enumerate(claims):
        minimum = 0
        for request in claim.requests:
            least = -1
            for exact in request.alternatives:
                if exact.allocation_mode != "ExactCount" or exact.admin_access or \
                        exact.derived_attributes:
                    return None
                device_class = classes.get(exact.device_class)
                if device_class is None:
                    return None
                ok, failing = node_arrays.selection(device_class.selectors + exact.selectors)
                if failing:
                    return None
                if tainted:
                    ok &= ~node_arrays.blocked(exact)
                if exact.capacity_requests and not node_arrays.representable(exact):
                    raise Unsupported("a capacity request that cannot be rounded in 64-bit "
                                      "integers")
                fits, shared, token = node_arrays.capacity(exact)
                ok &= fits
                a = len(found)
                if shared:
                    slot_key.append((a, token, ok & shared_bits))
                    for d, take in shared.items():
                        if ok >> d & 1:
                            takes[(a, d)] = take
                name = request.result_name(exact)
                found.append((ci, request, exact, device_class, name))
                names.append(name)
                bits.append(ok)
                alt_claim.append(ci)
                alt_count.append(min(exact.count, model.MAX_DEVICES_PER_CLAIM + 1))
                least = exact.count if least < 0 else min(least, exact.count)
            if least < 0:
                return None
            minimum += least
            req_alt_start.append(len(found))
        if minimum > model.MAX_DEVICES_PER_CLAIM:
            return None
        claim_req_start.append(len(req_alt_start) - 1)
    # Each constraint by the alternatives it covers, not the request names it lists.
    constraints = tuple([(ci, tuple([a for a, (alt_ci, request, exact, _, _) in
                                     enumerate(found) if alt_ci == ci and k.covers(
                                         request.name, None if request.exactly is not None
                                         else exact.name)]),
                          k.match_attribute, k.distinct_attribute)
                         for ci, claim in enumerate(claims) for k in claim.constraints])
    key = (tuple(bits), tuple(alt_claim), tuple(alt_count), tuple(req_alt_start),
           tuple(claim_req_start), tuple(slot_key), constraints)
    return (key, found, bits, alt_claim, alt_count, req_alt_start, claim_req_start,
            slot_key, takes, tuple(names), None)


class Problem:
    """The flattened problem: `packed` and `header` are what `_alloc.Compiled` binds,
    `state()` gives the per-call array `_alloc.search` takes with it.

    Compiled from a `reference.prepare` of the claims. Unless `baked`, that prepare saw an
    empty allocated state and the problem holds for any state `state()` accepts;
    otherwise candidacy already excludes what the prepared state holds in use.
    """

    #: Per device: (capacity name, slot, scale) of its capacity slots.
    cap_slots: list[list[tuple[str, int, int]]]
    #: Every alternative of every request of every claim, in order: (claim index,
    #: alternative). A renamed view makes them on first read (`__getattr__`).
    alts: list[tuple[int, reference.Alternative]]

    def __init__(self, p: reference.Prepared, *, baked: bool = False) -> None:
        self._prepared: reference.Prepared | None = p
        # What `prepared` is made from when `common` compiled the problem.
        self._unprepared: tuple[model.Node, tuple[model.ResourceSlice, ...],
                                Mapping[str, model.DeviceClass],
                                list[list[list[reference.Alternative]]]] | None = None
        self.claims = p.claims
        self.baked = baked
        nd = cache.for_slices(p.inventory.slices).devices_for(p.node)
        self.devices = nd.devices
        node = self.node = NodeArrays.of(nd)
        n_dev = node.n_dev
        req_alt_start, claim_req_start = self._alternatives(p)
        n_alt = len(self.alts)
        member, all_lists, all_block = self._candidacy(nd, p.inventory.allocated, baked)
        con_claim_start, con_match, con_cover, con_val, n_values = self._constraints(
            p.claims, all_lists)
        dev_cap_start, take_off, take_vals, cap_total = self._capacity_slots(
            p.inventory.allocated, baked)
        dev_cls, members, cls_multi = self._classes(member, con_val, len(con_match))
        alt_cls_start, alt_cls, alt_dev_start, alt_dev = self._lists(member, members,
                                                                      all_lists)
        self.n_dev = n_dev
        self.n_values = n_values
        cls_start = [0]
        flat: list[int] = []
        for m in members:
            flat.extend(m)
            cls_start.append(len(flat))
        # The arrays are packed into one buffer and not kept apart (memory: problems are
        # kept per node and claim content).
        fields: dict[str, Sequence[int]] = {
            "claim_req_start": claim_req_start,
            "req_alt_start": req_alt_start,
            "alt_claim": [ci for ci, _ in self.alts],
            "alt_mode": [1 if alt.all_devices is not None else 0 for _, alt in self.alts],
            # More than a claim holds is skipped whatever the amount: cap it so that
            # a count near 2**63 cannot overflow the core's sums.
            "alt_count": [min(alt.needed, model.MAX_DEVICES_PER_CLAIM + 1)
                          if alt.all_devices is None else len(all_lists[a] or ())
                          for a, (_, alt) in enumerate(self.alts)],
            "alt_cls_start": alt_cls_start,
            "alt_cls": alt_cls,
            "alt_dev_start": alt_dev_start,
            "alt_dev": alt_dev,
            "alt_dev_block": all_block,
            "dev_cls": dev_cls,
            "dev_pool": node.dev_pool,
            "dev_multi": node.dev_multi,
            "dev_ctr_start": node.dev_ctr_start,
            "ctr_id": node.ctr_id,
            "ctr_amt": node.ctr_amt,
            "dev_cap_start": dev_cap_start,
            "take_off": take_off,
            "take_vals": take_vals,
            "cls_start": cls_start,
            "cls_members": flat,
            "cls_multi": cls_multi,
            "con_claim_start": con_claim_start,
            "con_match": con_match,
            "con_cover": con_cover,
            "con_val": con_val,
        }
        self.n_classes = len(members)
        self.n_counters = len(node.ctr_total)
        self.n_cap = len(cap_total)
        self.empty_state = self._empty_state(cap_total)
        self.packed, self.header = self._pack(fields)
        self.native: object | None = None  # the bound `_alloc.Compiled`, made by fitcore.api
        self._state_of: model.AllocatedState | None = None
        self._state: array.array[int] | None = None
        #: Per (alternative, device) pair, its result once made (`results`).
        self.made: list[model.DeviceResult | None] = [None] * (n_alt * n_dev)
        #: Per alternative, its result name.
        self.names = tuple(alt.result_name for _, alt in self.alts)

    @property
    def prepared(self) -> reference.Prepared:
        """The prepared question (made on first use for a problem compiled by `common`)."""
        if self._prepared is None:
            assert self._unprepared is not None
            node, slices, classes, alternatives = self._unprepared
            inventory = model.Inventory(slices, classes, _EMPTY)
            entry = cache.for_slices(inventory.slices)
            self._prepared = reference.Prepared(node, inventory, self.claims,
                                                entry.pools_for(node), entry.selector,
                                                alternatives)
        return self._prepared

    @classmethod
    def common(cls, node: model.Node, inventory: model.Inventory,
               claims: Sequence[model.Claim], nd: cache.NodeDevices) -> Problem | None:
        """The problem `Problem(reference.prepare(node, inventory, claims))` compiles —
        the same arrays — for claims of the common form (every alternative ExactCount
        without adminAccess, of a class that exists, no selector failing on a device of
        the node, at most a claim's cap of devices), made without `reference.prepare`:
        candidacy from the node's kept selector and capacity bitsets (NodeArrays), device
        classes and lists in the compiled core (`_alloc.device_classes`). None for any
        other claims (the full path then answers, errors included). The problem is for
        an empty allocated state, whatever `inventory` holds; `nd` is the node's
        `cache.NodeDevices`.
        """
        walked = _call.walk(NodeArrays.of(nd), inventory.classes, claims, Unsupported)
        return None if walked is None else cls._made(node, inventory, claims, nd, walked)

    @classmethod
    def common_or_same(cls, node: model.Node, inventory: model.Inventory,
                       claims: Sequence[model.Claim], nd: cache.NodeDevices,
                       walked: Walked | None = None) -> Problem | None:
        """`common`, or a problem `common` made before on this node for claims of another
        content that compiles to the same arrays, result names and capacity takes (a
        template that differs in names or in tolerations of taints the node's devices do
        not have). That problem answers for these claims as a problem kept by content
        answers for every pod of a template (its claims are the first pod's; fitcore.api
        explains a no-fit with the caller's claims). `walked`: the claims' walk with
        `NodeArrays.same`, when the caller has made it (`_call.kept`)."""
        node_arrays = NodeArrays.of(nd)
        if walked is None:
            walked = _call.walk(node_arrays, inventory.classes, claims, Unsupported,
                                node_arrays.same)
        if walked is None or isinstance(walked, Problem):  # (the walk looked it up)
            return walked
        shared: Problem | None = walked[10]
        if shared is not None:  # the same arrays, other result names
            return shared.renamed(node, inventory, claims, walked)
        problem = cls._made(node, inventory, claims, nd, walked)
        node_arrays.keep_same(walked[0], problem)
        return problem

    def renamed(self, node: model.Node, inventory: model.Inventory,
                claims: Sequence[model.Claim], walked: Walked) -> Problem:
        """This problem for `claims`, which walk to the same key under other request
        names (`_walk`): the arrays, the bound core and the capacity slots are shared,
        never changed; result names and results are the claims' own, and so are the
        alternatives, made when first read (a fit reads only the names)."""
        view = Problem.__new__(Problem)
        view.__dict__ = attributes = self.__dict__.copy()  # (faster than update)
        del attributes["alts"], attributes["_unprepared"]
        attributes["_pending"] = (node, inventory.slices, inventory.classes, walked)
        attributes["names"] = walked[9]
        attributes["claims"] = claims
        attributes["_prepared"] = None
        attributes["_state_of"] = attributes["_state"] = None
        attributes["made"] = [None] * (len(walked[9]) * self.n_dev)
        return view

    def __getattr__(self, name: str) -> Any:
        # Called only for a missing attribute: the alternatives of a renamed view.
        pending = self.__dict__.get("_pending")
        if pending is None or name not in ("alts", "_unprepared"):
            raise AttributeError(name)
        self._pending = None
        node, slices, classes, walked = pending
        self._named(node, slices, classes, walked)
        return self.__dict__[name]

    def _named(self, node: model.Node, slices: tuple[model.ResourceSlice, ...],
               classes: Mapping[str, model.DeviceClass], walked: Walked) -> None:
        """The alternatives of `self.claims`, from their walk."""
        claims = self.claims
        found, alt_claim, req_alt_start = walked[1], walked[3], walked[5]
        alts: list[tuple[int, reference.Alternative]] = []
        alternatives: list[list[list[reference.Alternative]]] = [[] for _ in claims]
        for r in range(len(req_alt_start) - 1):
            options = []
            for ci, request, exact, device_class, name in \
                    found[req_alt_start[r]:req_alt_start[r + 1]]:
                alt = reference.Alternative(
                    request, exact, device_class, name,
                    exact.name if request.exactly is None else None,
                    f"ResourceClaim {claims[ci].key} request {name}")
                alts.append((ci, alt))
                options.append(alt)
            alternatives[alt_claim[req_alt_start[r]]].append(options)
        self.alts = alts
        # Not the inventory: a kept problem must not hold a caller's allocated state.
        self._unprepared = (node, slices, classes, alternatives)

    @classmethod
    def _made(cls, node: model.Node, inventory: model.Inventory,
              claims: Sequence[model.Claim], nd: cache.NodeDevices, walked: Walked
              ) -> Problem:
        assert _alloc is not None  # only fitcore.api calls this, with the core built
        _, _, bits, alt_claim, alt_count, req_alt_start, claim_req_start, slot_list, \
            takes = walked[:9]
        node_arrays = NodeArrays.of(nd)
        n_dev = node_arrays.n_dev
        self = cls.__new__(cls)
        self.node = node_arrays
        self.claims = claims
        self._named(node, inventory.slices, inventory.classes, walked)
        self.names = walked[9]
        self._prepared = None
        self.takes = takes
        n_alt = len(self.alts)
        self.made = [None] * (n_alt * n_dev)
        self.baked = False
        self.devices = nd.devices
        self.all_shared = set()
        self.n_dev = n_dev
        constraints = [k for claim in claims for k in claim.constraints]
        con_claim_start: list[int]
        con_match: list[int]
        con_cover: list[int]
        if not constraints:
            con_claim_start, con_match, con_cover, con_val, n_values = \
                [0] * (len(claims) + 1), [], [], _NONE, 1
        elif len(constraints) == 1:
            con_claim_start, con_match, con_cover, con_val, n_values = \
                self._one_constraint(claims, constraints[0])
        else:
            con_claim_start, con_match, con_cover, con_list, n_values = \
                self._constraints(claims, [None] * n_alt)
            con_val = array.array("q", con_list)
        self.n_values = n_values
        slot_key = tuple(slot_list)
        dev_cap_start, take_off, take_vals, cap_total = self._shared_slots(slot_key)
        dev_cls, cls_start, cls_members, cls_multi, alt_cls_start, alt_cls = \
            _alloc.device_classes(n_alt, node_arrays.base, node_arrays.dev_multi,
                                  b"".join([ok.to_bytes((n_dev + 7) // 8, "little")
                                            for ok in bits]),
                                  len(con_match), con_val)
        self.n_classes = len(cls_multi)
        self.n_counters = len(node_arrays.ctr_total)
        self.n_cap = len(cap_total)
        if not cap_total:
            self.empty_state = node_arrays.empty_state()
        elif self.empty_state is None:  # not kept with the slots yet
            self.empty_state = node_arrays.slot_sets[(n_alt, slot_key)][5] = \
                self._empty_state(cap_total)
        # In the order of FIELDS; an int stands for that many zeros (alt_mode, alt_dev_start).
        self.packed, self.header = _alloc.pack(
            [claim_req_start, req_alt_start, alt_claim, n_alt, alt_count,
             alt_cls_start, alt_cls, n_alt + 1, (), (), dev_cls,
             node_arrays.dev_pool, node_arrays.dev_multi, node_arrays.dev_ctr_start,
             node_arrays.ctr_id, node_arrays.ctr_amt, dev_cap_start, take_off, take_vals,
             cls_start, cls_members, cls_multi, con_claim_start, con_match, con_cover,
             con_val],
            [len(claim_req_start) - 1, len(req_alt_start) - 1, n_alt, n_dev, n_values,
             self.n_classes, self.n_counters, self.n_cap, node_arrays.n_pools])
        self.native = None
        self._state_of = None
        self._state = None
        return self

    def _shared_slots(self, key: tuple[tuple[int, int, int], ...]
                      ) -> tuple[Sequence[int], array.array[int], list[int], list[int]]:
        """`_capacity_slots` of an empty state, kept per node by `key`: per alternative
        that may take a shared device, its capacity outcome (NodeArrays.capacity) and
        which shared devices it may take. The arrays are shared, never changed."""
        node, n_dev, n_alt = self.node, self.node.n_dev, len(self.alts)
        if not key:
            self.cap_slots = node.no_slots
            return node.no_slot_starts, array.array("q", [-1]) * (n_alt * n_dev), [], []
        found = node.slot_sets.get((n_alt, key))
        if found is None:
            found = _keep(node.slot_sets, (n_alt, key), self._make_shared_slots())
        self.cap_slots = found[4]
        self.empty_state = found[5]
        return found[0], found[1], found[2], found[3]

    def _make_shared_slots(self) -> list[Any]:
        node, n_dev, n_alt = self.node, self.node.n_dev, len(self.alts)
        take_off = array.array("q", [-1]) * (n_alt * n_dev)
        cap_start = [0] * (n_dev + 1)
        cap_total: list[int] = []
        self.cap_slots = [[] for _ in range(n_dev)]
        take_vals: list[int] = []
        for d in node.shared:
            takes = [(a, self.takes[(a, d)]) for a in range(n_alt) if (a, d) in self.takes]
            names, totals, scaled = node.shared_slots(d, [take for _, take in takes])
            first = len(cap_total)
            self.cap_slots[d] = [(name, first + i, scale) for i, (name, scale) in
                                 enumerate(names)]
            cap_total.extend(totals)
            cap_start[d + 1] = len(names)
            for (a, _), vals in zip(takes, scaled, strict=True):
                take_off[a * n_dev + d] = len(take_vals)
                take_vals.extend(vals)
        # The empty state follows (made by `common` once the problem's sizes are known).
        return [list(itertools.accumulate(cap_start)), take_off, take_vals, cap_total,
                self.cap_slots, None]

    def _one_constraint(self, claims: Sequence[model.Claim], constraint: model.Constraint
                        ) -> tuple[list[int], list[int], list[int], array.array[int], int]:
        """`_constraints` for claims with one constraint over all: the node's interned
        values of its attribute serve as they are."""
        con_claim_start = [0]
        con_cover: list[int] = []
        for ci, claim in enumerate(claims):
            if claim.constraints:
                con_cover = [1 if alt_ci == ci and constraint.covers(
                    alt.request.name, alt.subrequest) else 0 for alt_ci, alt in self.alts]
            con_claim_start.append(1 if claim.constraints or con_claim_start[-1] else 0)
        attribute = constraint.match_attribute or constraint.distinct_attribute or ""
        ids, n_values = self.node.attribute_ids(attribute)
        return (con_claim_start, [1 if constraint.match_attribute is not None else 0],
                con_cover, ids, max(n_values, 1))

    def _alternatives(self, p: reference.Prepared) -> tuple[list[int], list[int]]:
        """Every alternative of every request of every claim, in order (`self.alts`:
        (claim index, alternative)); returns where each request's alternatives and each
        claim's requests start."""
        self.alts = []
        req_alt_start = [0]
        claim_req_start = [0]
        for ci, per_request in enumerate(p.alternatives):
            for alts in per_request:
                for alt in alts:
                    if alt.exact.admin_access:
                        raise Unsupported("adminAccess")
                    self.alts.append((ci, alt))
                req_alt_start.append(len(self.alts))
            claim_req_start.append(len(req_alt_start) - 1)
        return req_alt_start, claim_req_start

    def _candidacy(self, nd: cache.NodeDevices, allocated: model.AllocatedState, baked: bool
                   ) -> tuple[list[list[bool]], list[list[int] | None], list[int]]:
        """Which devices each alternative may take, with what capacity (`self.takes`):
        (member[alternative][device], the device list of each All alternative (None for
        the others), per device of those lists whether it is tainted). A baked problem
        leaves out what the prepared state holds in use."""
        n_dev = self.node.n_dev
        index = nd.index
        member = [[False] * n_dev for _ in range(len(self.alts))]
        self.takes: dict[tuple[int, int], dict[str, values.Quantity]] = {}
        all_lists: list[list[int] | None] = []
        all_block: list[int] = []  # per device of an All list: tainted
        #: Shared devices of All lists: a state that already uses one needs a baked problem.
        self.all_shared: set[int] = set()
        for a, (_, alt) in enumerate(self.alts):
            if alt.all_devices is not None:
                ids = []
                for pool, device in alt.all_devices:
                    d = index[model.DeviceId(pool.driver, pool.name, device.name)]
                    take = semantics.capacity_take(alt.exact, device)
                    assert take is not None  # prepare() keeps only devices with capacity
                    all_block.append(0 if semantics.taint_allows(device, alt.exact) else 1)
                    self.takes[(a, d)] = take
                    ids.append(d)
                    member[a][d] = True
                    if device.allow_multiple_allocations:
                        self.all_shared.add(d)
                all_lists.append(ids)
                continue
            all_lists.append(None)
            _representable(alt.exact, nd)
            for d, take in nd.candidates(alt.exact, alt.device_class, alt.label):
                _, device, ident = self.devices[d]
                if baked:
                    if ident in allocated.dedicated:
                        continue
                    used = allocated.consumed.get(ident)
                    if used and not device.allow_multiple_allocations and \
                            not semantics.capacity_fits(device, take, used):
                        continue
                self.takes[(a, d)] = take
                member[a][d] = True
        return member, all_lists, all_block

    def _constraints(self, claims: Sequence[model.Claim], all_lists: list[list[int] | None]
                     ) -> tuple[list[int], list[int], list[int], list[int], int]:
        """Claim constraints over interned attribute values: (where each claim's
        constraints start, match (1) or distinct (0), which alternatives each covers, per
        device its value id (-1: none), how many values)."""
        n_alt = len(self.alts)
        con_claim_start = [0]
        con_match: list[int] = []
        con_cover: list[int] = []
        con_val: list[int] = []
        interned: dict[tuple[str, object], int] = {}
        for ci, claim in enumerate(claims):
            for constraint in claim.constraints:
                attribute = constraint.match_attribute or constraint.distinct_attribute or ""
                con_match.append(1 if constraint.match_attribute is not None else 0)
                for alt_ci, alt in self.alts:
                    con_cover.append(1 if alt_ci == ci and constraint.covers(
                        alt.request.name, alt.subrequest) else 0)
                con_val.extend(-1 if k is None else interned.setdefault(k, len(interned))
                               for k in self.node.attribute_keys(attribute))
            con_claim_start.append(len(con_match))
        for j, cover in enumerate(con_cover):
            a = j % n_alt
            if cover and all_lists[a] is not None:
                # Upstream fails the whole allocation when a device of an All request
                # breaks a constraint, but only if its search order gets there first:
                # the reference follows that order, the class-based search cannot.
                raise Unsupported("allocationMode All under a claim constraint")
        return con_claim_start, con_match, con_cover, con_val, max(len(interned), 1)

    def _capacity_slots(self, allocated: model.AllocatedState, baked: bool
                        ) -> tuple[list[int], array.array[int], list[int], list[int]]:
        """Capacity slots of shared devices (a dedicated device has none) and what each
        alternative takes of them, in integers at a scale per slot (`self.cap_slots`):
        (where each device's slots start, per (alternative, device) the offset of its
        takes (-1: none), the takes, each slot's total)."""
        node, n_dev, n_alt = self.node, self.node.n_dev, len(self.alts)
        cap_count = [0] * n_dev
        cap_total: list[int] = []
        #: Per device: (capacity name, slot, scale) of its capacity slots.
        self.cap_slots = [[] for _ in range(n_dev)]
        take_off = array.array("q", [-1] * (n_alt * n_dev))
        take_vals: list[int] = []
        for d in node.shared:
            _, device, ident = self.devices[d]
            used = (allocated.consumed.get(ident) or {}) if baked else {}
            takes = [(a, self.takes[(a, d)]) for a in range(n_alt) if (a, d) in self.takes]
            slots = self.cap_slots[d]
            for name in sorted(device.capacity):
                amounts = [device.capacity[name].value.value]
                if name in used:
                    amounts.append(used[name].value)
                amounts += [take[name].value for _, take in takes]
                scale = _scale(amounts)
                slots.append((name, len(cap_total), scale))
                cap_total.append(_scaled(device.capacity[name].value.value, scale))
            cap_count[d] = len(slots)
            for a, take in takes:
                take_off[a * n_dev + d] = len(take_vals)
                take_vals.extend(_scaled(take[name].value, scale) for name, _, scale in slots)
        return [0, *itertools.accumulate(cap_count)], take_off, take_vals, cap_total

    def _classes(self, member: list[list[bool]], con_val: list[int], n_con: int
                 ) -> tuple[array.array[int], list[list[int]], list[int]]:
        """Equivalence classes of devices: the same pool and counters, the same
        candidacy for every alternative and the same value for every constraint (a
        shared device is a class of its own): (per device its class, each class's
        devices, whether each class is a shared device)."""
        node, n_dev = self.node, self.node.n_dev
        signature_of: dict[tuple[object, ...], int] = {}
        dev_cls = _q(n_dev)
        members: list[list[int]] = []
        cls_multi: list[int] = []
        # Per device: its candidacy for each alternative, its value for each constraint.
        candidacy = list(zip(*member, strict=True)) if member else [()] * n_dev
        valued = list(zip(*[con_val[j * n_dev:(j + 1) * n_dev] for j in range(n_con)],
                          strict=True)) if n_con else [()] * n_dev
        for d in range(n_dev):
            if node.multi[d]:
                k = len(members)
                members.append([d])
                cls_multi.append(1)
            else:
                sig = (node.dev_pool[d], node.uses[d], candidacy[d], valued[d])
                k = signature_of.get(sig, -1)
                if k < 0:
                    k = signature_of[sig] = len(members)
                    members.append([])
                    cls_multi.append(0)
                members[k].append(d)
            dev_cls[d] = k
        return dev_cls, members, cls_multi

    def _lists(self, member: list[list[bool]], members: list[list[int]],
               all_lists: list[list[int] | None]
               ) -> tuple[list[int], list[int], list[int], list[int]]:
        """Per alternative, the device classes it may take from (or, for All, its
        devices): (class list starts, class lists, device list starts, device lists)."""
        alt_cls_start = [0]
        alt_cls: list[int] = []
        alt_dev_start = [0]
        alt_dev: list[int] = []
        for a in range(len(self.alts)):
            lst = all_lists[a]
            if lst is None:
                alt_cls.extend(k for k in range(len(members)) if member[a][members[k][0]])
            else:
                alt_dev.extend(lst)
            alt_cls_start.append(len(alt_cls))
            alt_dev_start.append(len(alt_dev))
        return alt_cls_start, alt_cls, alt_dev_start, alt_dev

    def _empty_state(self, cap_total: list[int]) -> array.array[int]:
        """The state of an empty cluster, laid out as STATE_FIELDS: the node's, then the
        capacity slots'."""
        state = array.array("q", self.node.empty_state())
        state.extend(cap_total)
        return state

    #: The arrays `_alloc.search` reads, in the order of `_alloc.pxd`'s Problem pointers.
    FIELDS = ("claim_req_start", "req_alt_start", "alt_claim", "alt_mode", "alt_count",
              "alt_cls_start", "alt_cls", "alt_dev_start", "alt_dev", "alt_dev_block",
              "dev_cls", "dev_pool", "dev_multi", "dev_ctr_start", "ctr_id", "ctr_amt",
              "dev_cap_start", "take_off", "take_vals", "cls_start", "cls_members",
              "cls_multi", "con_claim_start", "con_match", "con_cover", "con_val")
    #: The per-call state array: dev_block[n_dev] shared_before[n_dev] ctr_avail[n_counters]
    #: pool_bad[n_pools] cap_left[n_cap].
    STATE_FIELDS = ("dev_block", "shared_before", "ctr_avail", "pool_bad", "cap_left")

    def _pack(self, fields: dict[str, Sequence[int]]
              ) -> tuple[array.array[int], array.array[int]]:
        """One contiguous buffer and a header of sizes and offsets, so that the compiled
        search takes a single buffer per call instead of thirty."""
        packed: array.array[int] = array.array("q")
        offsets = []
        for name in self.FIELDS:
            offsets.append(len(packed))
            packed.extend(fields[name])
        header = array.array("q", [
            len(fields["claim_req_start"]) - 1, len(fields["req_alt_start"]) - 1,
            len(self.alts), self.n_dev, self.n_values, self.n_classes, self.n_counters,
            self.n_cap, self.node.n_pools, *offsets])
        return packed, header

    def state(self, allocated: model.AllocatedState) -> array.array[int] | None:
        """The per-call state array for `allocated`, or None when this problem cannot
        take that state (compile one with it baked in). The last one is remembered."""
        if allocated is self._state_of:
            return self._state
        state = self._state = _call.state(self, allocated) if _call is not None else \
            self._make_state(allocated)
        self._state_of = allocated
        return state

    def _make_state(self, allocated: model.AllocatedState) -> array.array[int] | None:
        """The reference of `_call.state` (tests/fitcore/test_renamed_problems.py)."""
        state = array.array("q", self.empty_state)
        dedicated, shared, consumed = allocated.dedicated, allocated.shared, allocated.consumed
        if not (dedicated or shared or consumed):
            return state
        node, n_dev = self.node, self.n_dev
        for d, ident in enumerate(node.ids):
            if ident in dedicated:
                state[d] = 1
            used = consumed.get(ident)
            if not used:
                continue
            if not node.multi[d]:
                if self.baked:
                    continue
                return None
            if d in self.all_shared and not self.baked:
                return None
            state[n_dev + d] = 1
            cap_base = 2 * n_dev + self.n_counters + node.n_pools
            for name, slot, scale in self.cap_slots[d]:
                quantity = used.get(name)
                if quantity is None:
                    continue
                v = quantity.value  # a Fraction; scaled with ints, which is much faster
                if scale % v.denominator:
                    return None
                state[cap_base + slot] -= v.numerator * (scale // v.denominator)
        if node.counter_users:
            ctr_base, pool_base = 2 * n_dev, 2 * n_dev + self.n_counters
            for ident, uses in node.counter_users:
                if ident in dedicated or ident in shared or ident in consumed:
                    for cid, scaled in uses:
                        state[ctr_base + cid] -= scaled
            for cid in range(self.n_counters):
                if state[ctr_base + cid] < 0:
                    state[pool_base + node.ctr_pool[cid]] = 1
        return state

    def results(self, pairs: Sequence[int]) -> tuple[tuple[model.DeviceResult, ...], ...]:
        """The search's (alternative a, device d) pairs, each a * n_dev + d and in claim
        order, as results grouped per claim."""
        made = self.made
        out = [made[pair] or self.result(pair) for pair in pairs]
        if len(self.claims) == 1:
            return (tuple(out),)
        per_claim: list[list[model.DeviceResult]] = [[] for _ in self.claims]
        for pair, result in zip(pairs, out, strict=True):
            per_claim[self.alts[pair // self.n_dev][0]].append(result)
        return tuple(tuple(r) for r in per_claim)

    def result(self, pair: int) -> model.DeviceResult:
        """The result of the search's (alternative, device) pair `pair` (a * n_dev + d),
        made once and kept in `made`: results are immutable and depend on the pair."""
        a, d = divmod(pair, self.n_dev)
        name = self.names[a]
        _, device, ident = self.devices[d]
        if device.allow_multiple_allocations:
            result = _device_result(name, ident, True, self.takes[(a, d)])
        else:
            result = self.node.dedicated_result(name, d)
        self.made[pair] = result
        return result
