# The compiled core's per-call path over the claims, before the search: the content key
# a kept problem is found by, the common-form walk of a never-seen content, and the
# results of a search. The facade (fitcore/compiled.py) calls in; its plain-Python
# functions of the same names are the reference (tests/fitcore/test_call_path.py).

from cpython cimport array
from cpython.object cimport PyObject_GenericSetAttr
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

import array

from fitcore import model

cdef object _NodeFit = model.NodeFit
cdef object _DeviceResult = model.DeviceResult
cdef object _MAX_COUNT = model.MAX_DEVICES_PER_CLAIM + 1
cdef object _MAX_PER_CLAIM = model.MAX_DEVICES_PER_CLAIM
cdef tuple _NO_CAPACITY = ()


cdef tuple _exact_key(object e):
    cdef object capacity = None
    cdef object tolerations = ()
    requests = e.capacity_requests
    if requests:
        capacity = tuple(sorted([(name, q.value.numerator, q.value.denominator)
                                 for name, q in requests.items()]))
    listed = e.tolerations
    if listed:
        tolerations = tuple([(t.key, t.operator, t.value, t.effect) for t in listed])
    return (e.name, e.device_class, e.selectors, e.allocation_mode, e.count, e.admin_access,
            tolerations, capacity, e.derived_attributes)


def content_key(claims):
    """compiled.content_key: what allocation reads of the claims (no names)."""
    return _content_key(claims)


cdef tuple _content_key(object claims):
    cdef list key = []
    cdef list requests
    for c in claims:
        requests = []
        for r in c.requests:
            exact = r.exactly
            if exact is not None:
                requests.append((r.name, _exact_key(exact)))
            else:
                requests.append((r.name, None, *[_exact_key(e) for e in r.first_available]))
        listed = c.constraints
        constraints = tuple([(k.requests, k.match_attribute, k.distinct_attribute)
                             for k in listed]) if listed else ()
        key.append((*requests, constraints))
    return tuple(key)


def walk(node_arrays, classes, claims, unsupported, dict same=None):
    """compiled._walk: the claims' candidacy on the node from its kept bitsets, as a
    tuple (key, found, bits, alt_claim, alt_count, req_alt_start, claim_req_start,
    slot_key, takes, names, shared), or None when they are not of the common form; or,
    when `same` (NodeArrays.same) holds a live problem under that key with the same
    result names, that problem (with other names it is `shared`, else None). Kept
    results of `node_arrays` are read directly; a miss asks its method (which keeps the
    result). `unsupported` is the exception class raised for an unroundable capacity
    request."""
    return _walk(node_arrays, classes, claims, unsupported, same)


cdef object _walk(object node_arrays, object classes, object claims, object unsupported,
                  dict same):
    cdef Py_ssize_t ci = -1, a, first, i
    cdef dict by_name = classes if type(classes) is dict else None
    cdef list tainted = node_arrays.tainted
    cdef dict selections = node_arrays._selections
    cdef dict capacities = node_arrays._capacities
    cdef dict representable = node_arrays._representable
    shared_bits = node_arrays.shared_bits
    cdef list found = [], bits = [], alt_claim = [], alt_count = [], names = [], subs = []
    cdef list req_alt_start = [0], claim_req_start = [0], slot_key = [], constraints = []
    cdef dict takes = {}
    for claim in claims:
        ci += 1
        minimum = 0
        first = len(found)
        for request in claim.requests:
            least = -1
            exactly = request.exactly
            for exact in ((exactly,) if exactly is not None else request.first_available):
                if exact.allocation_mode != "ExactCount" or exact.admin_access or \
                        exact.derived_attributes:
                    return None
                device_class = by_name.get(exact.device_class) if by_name is not None \
                    else classes.get(exact.device_class)
                if device_class is None:
                    return None
                expressions = device_class.selectors + exact.selectors
                selected = selections.get(expressions)
                if selected is None:
                    selected = node_arrays.selection(expressions)
                ok, failing = selected
                if failing:
                    return None
                if tainted:
                    ok &= ~node_arrays.blocked(exact)
                requests = exact.capacity_requests
                # The key NodeArrays.capacity and .representable keep their results by.
                asked = tuple(sorted([(name, q.value.numerator, q.value.denominator)
                                      for name, q in requests.items()])
                              ) if requests else _NO_CAPACITY  # compiled.capacity_key
                if requests:
                    fine = representable.get(asked)
                    if fine is None:
                        fine = node_arrays.representable(exact)
                    if not fine:
                        raise unsupported("a capacity request that cannot be rounded in "
                                          "64-bit integers")
                capacity = capacities.get(asked)
                if capacity is None:
                    capacity = node_arrays.capacity(exact)
                fits, shared, token = capacity
                ok &= fits
                a = len(found)
                if shared:
                    slot_key.append((a, token, ok & shared_bits))
                    for d, take in shared.items():
                        if ok >> d & 1:
                            takes[(a, d)] = take
                name = exact.name if exactly is not None else \
                    f"{request.name}/{exact.name}"
                found.append((ci, request, exact, device_class, name))
                names.append(name)
                subs.append(None if exactly is not None else exact.name)
                bits.append(ok)
                alt_claim.append(ci)
                count = exact.count
                alt_count.append(count if count < _MAX_COUNT else _MAX_COUNT)
                if least < 0 or count < least:
                    least = count
            if least < 0:
                return None
            minimum += least
            req_alt_start.append(len(found))
        if minimum > _MAX_PER_CLAIM:
            return None
        claim_req_start.append(len(req_alt_start) - 1)
        for k in claim.constraints:
            listed = k.requests
            covered = []
            for i in range(first, len(found)):
                # model.Constraint.covers, by position: the key holds no names.
                rname = (<tuple> found[i])[1].name
                sub = subs[i]
                if not listed or rname in listed or (
                        sub is not None and f"{rname}/{sub}" in listed):
                    covered.append(i)
            constraints.append((ci, tuple(covered), k.match_attribute, k.distinct_attribute))
    key = (tuple(bits), tuple(alt_claim), tuple(alt_count), tuple(req_alt_start),
           tuple(claim_req_start), tuple(slot_key), tuple(constraints))
    named = tuple(names)
    shared = None
    ref = same.get(key) if same is not None else None
    if ref is not None:
        shared = ref()
        if shared is not None and shared.names == named:
            return shared
    return (key, found, bits, alt_claim, alt_count, req_alt_start, claim_req_start,
            slot_key, takes, named, shared)


def kept(node, inventory, claims, node_devices, compile, unsupported):
    """compiled.kept: what the node keeps for the claims' content (a compiled problem or
    a marker saying how else to answer), found or made and kept. On a miss with the
    node's arrays made, the claims are walked here, and a problem the node holds under
    the walk's key (`NodeArrays.same`: claims that differ from claims asked before only
    in names the result does not use or tolerations of taints no device has) is kept
    under the new content without leaving the compiled core; otherwise `compile(node,
    inventory, claims, node_devices, walked)` makes the outcome, given the walk when it
    is a common form's (else None: `compile` walks or prepares itself)."""
    classes = inventory.classes
    cdef tuple content = (id(classes), _content_key(claims))
    cdef dict problems = node_devices.problems
    found = problems.get(content)
    if found is not None:
        return (<tuple> found)[1]
    walked = None
    arrays = node_devices.arrays
    if arrays is not None:
        try:
            walked = _walk(arrays, classes, claims, unsupported, arrays.same)
        except unsupported:  # `compile` walks again and says so
            walked = None
    if walked is None or type(walked) is tuple:
        static = compile(node, inventory, claims, node_devices, walked)
    else:
        static = walked  # the problem of claims that walk alike
    _keep(node_devices, problems, content, (classes, static))
    return static


cdef _keep(node_devices, dict problems, tuple content, tuple value):
    # cache.NodeDevices.keep_problem for a value that is not an exception (no frames to
    # drop): kept on the node and in the store's order, the oldest out past its bound.
    problems[content] = value
    store = node_devices.store
    kept = store.kept
    kept.append((node_devices, content, value))
    if len(kept) > store.kept_problems:
        while len(kept) > store.kept_problems:
            old_devices, old, problem = kept.popleft()
            problems = old_devices.problems
            if problems.get(old) is problem:  # not since compiled again
                del problems[old]


def picked(list made, list pairs, make=None):
    """The kept results `made[pair]` of a search's pairs as a tuple; a result not made
    yet is made by `make(pair)` (compiled.Problem.result, which keeps it), or, without
    `make`, the answer is None."""
    cdef Py_ssize_t i, n = len(pairs)
    cdef tuple out = PyTuple_New(n)
    for i in range(n):
        result = made[<Py_ssize_t> pairs[i]]
        if result is None:
            if make is None:
                return None
            result = make(pairs[i])
        Py_INCREF(result)
        PyTuple_SET_ITEM(out, i, result)
    return out


def fits(list made, list pairs, str node, steps, make=None):
    """The `model.NodeFit` of a fit of one claim (`engine="c"`) from the search's pairs;
    results not made yet are made by `make` (see `picked`), or, without it, the answer
    is None."""
    allocations = picked(made, pairs, make)
    if allocations is None:
        return None
    return tuple.__new__(_NodeFit, ("fits", node, (allocations,), (), steps, "c"))


def state(problem, allocated):
    """compiled.Problem._make_state: the per-call state array of `problem` for the
    allocated state, or None when the problem cannot take it."""
    cdef array.array out = array.copy(problem.empty_state)
    dedicated, shared, consumed = allocated.dedicated, allocated.shared, allocated.consumed
    if not (dedicated or shared or consumed):
        return out
    cdef long long *s = out.data.as_longlongs
    node = problem.node
    cdef Py_ssize_t n_dev = problem.n_dev, n_counters = problem.n_counters
    cdef Py_ssize_t d, cid, slot, cap_base = 2 * n_dev + n_counters + node.n_pools
    cdef Py_ssize_t ctr_base = 2 * n_dev, pool_base = 2 * n_dev + n_counters
    cdef bint baked = problem.baked
    cdef list ids = node.ids, multi = node.multi, cap_slots = problem.cap_slots
    cdef list ctr_pool
    all_shared = problem.all_shared
    for d in range(n_dev):
        ident = ids[d]
        if ident in dedicated:
            s[d] = 1
        used = consumed.get(ident) if consumed else None
        if not used:
            continue
        if not multi[d]:
            if baked:
                continue
            return None
        if not baked and d in all_shared:
            return None
        s[n_dev + d] = 1
        for name, slot, scale in cap_slots[d]:
            quantity = used.get(name)
            if quantity is None:
                continue
            v = quantity.value
            denominator = v.denominator
            if scale % denominator:
                return None
            s[cap_base + slot] -= v.numerator * (scale // denominator)
    users = node.counter_users
    if users:
        for ident, uses in users:
            if ident in dedicated or ident in shared or ident in consumed:
                for cid, scaled in uses:
                    s[ctr_base + cid] -= <long long> scaled
        ctr_pool = node.ctr_pool
        for cid in range(n_counters):
            if s[ctr_base + cid] < 0:
                s[pool_base + <Py_ssize_t> ctr_pool[cid]] = 1
    return out


def device_result(str request, ident, bint shared=False, consumed=None):
    """`model.DeviceResult(request, ident, shared=shared, consumed_capacity=consumed)`
    (a new empty map when `consumed` is None) without the frozen dataclass's per-field
    __setattr__ calls (a fit under new request names makes its results anew)."""
    result = _DeviceResult.__new__(_DeviceResult)
    PyObject_GenericSetAttr(result, "request", request)
    PyObject_GenericSetAttr(result, "id", ident)
    PyObject_GenericSetAttr(result, "admin_access", False)
    PyObject_GenericSetAttr(result, "shared", shared)
    PyObject_GenericSetAttr(result, "consumed_capacity", {} if consumed is None else consumed)
    return result
