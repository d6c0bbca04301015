# cython: language_level=3
"""The per-node work of a cold gang decision, compiled: a node's index entry
(reference: `fitcore.snapshot._node_parts`, and `Snapshot.entry` for a node that is a
class of its own: `own_entry`) and its class under a gang's projection (reference:
`fitcore.projection.Projection.node_key` and the methods it calls).

Both run once per node (and the projection once per device) in the first decision of a
gang after the inventory is loaded. They work on Python objects (model dataclasses,
dicts, tuples), so nothing here runs without the GIL; what the compiled form saves is
the interpreter's dispatch and the intermediate lists, tuples and generators of the
reference. Kept answers (device keys, layouts, selector outcomes, candidacy, device
parts) live in the Projection and are shared with the reference: a miss calls the
reference's own method, so both see the same interned ids.
"""

import operator
from fractions import Fraction

from cpython.dict cimport PyDict_GetItem, PyDict_Next, PyDict_Size
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF

from fitcore import model, values

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)
    int PyObject_GC_IsTracked(object op)

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


# A device's fields read straight from its slots. A cold decision reads up to ten fields
# of every device of the cluster; through getattr each read looks the name up in the
# type and calls the slot's descriptor (most of the projection's own time at 10,000
# nodes, besides the first touch of the device). The offsets are the slot descriptors'
# own (`model.Device` is a slots dataclass), checked at import against getattr on a
# device; any other type, or a slot left empty, is read through getattr.
cdef type _DEVICE = model.Device
cdef object _MEMBER = type(model.Device.name)


cdef Py_ssize_t _offset(str name):
    descr = _DEVICE.__dict__.get(name)
    if type(descr) is not _MEMBER:
        return -1
    return (<PyMemberDescrObject*><PyObject*>descr).d_member.offset


cdef Py_ssize_t _D_NAME = _offset("name")
cdef Py_ssize_t _D_ATTRIBUTES = _offset("attributes")
cdef Py_ssize_t _D_CAPACITY = _offset("capacity")
cdef Py_ssize_t _D_CONSUMES = _offset("consumes_counters")
cdef Py_ssize_t _D_TAINTS = _offset("taints")
cdef Py_ssize_t _D_ALLOW = _offset("allow_multiple_allocations")
cdef Py_ssize_t _D_BINDING = _offset("binding_conditions")
cdef Py_ssize_t _D_BINDS = _offset("binds_to_node")
cdef bint _SLOTS_OK = False


cdef inline object _field(object d, bint fast, Py_ssize_t offset, str name):
    # The device's field `name`: from its slot when `fast` (a model.Device, offsets
    # checked), else (or when the slot is empty) through getattr.
    cdef PyObject* v
    if fast:
        v = (<PyObject**>((<char*><PyObject*>d) + offset))[0]
        if v is not NULL:
            return <object>v
    return getattr(d, name)


def _check_slots():
    global _SLOTS_OK
    offsets = (_D_NAME, _D_ATTRIBUTES, _D_CAPACITY, _D_CONSUMES, _D_TAINTS, _D_ALLOW,
               _D_BINDING, _D_BINDS)
    if min(offsets) <= 0:
        return False
    names = ("name", "attributes", "capacity", "consumes_counters", "taints",
             "allow_multiple_allocations", "binding_conditions", "binds_to_node")
    d = model.Device("d", {"a": 1}, {}, (), (), True, ("c",), True)
    _SLOTS_OK = True
    _SLOTS_OK = all(_field(d, True, o, n) is getattr(d, n)
                    for o, n in zip(offsets, names))
    return _SLOTS_OK


_check_slots()


# The same for the other objects a cold decision reads once per node or pool: a node's
# index entry (`snapshot._NodeEntry`, known at the first `project_entries` call: the
# module is imported by `snapshot` before it defines the type), its Node and its
# ResourceSlices. An offset is a slot descriptor's of an object slot (T_OBJECT_EX), else
# -1 (read through getattr); reads check the object's exact type first.
cdef Py_ssize_t _slot_offset(object t, str name):
    descr = t.__dict__.get(name)
    if type(descr) is not _MEMBER:
        return -1
    cdef PyMemberDef* m = (<PyMemberDescrObject*><PyObject*>descr).d_member
    return m.offset if m.type == T_OBJECT_EX and m.offset > 0 else -1


cdef inline object _slot(object o, Py_ssize_t offset, str name):
    # The field `name` of `o`: from its slot when `offset` is one (the caller checked
    # the type) and the slot is set, else through getattr.
    cdef PyObject* v
    if offset > 0:
        v = (<PyObject**>((<char*><PyObject*>o) + offset))[0]
        if v is not NULL:
            return <object>v
    return getattr(o, name)


cdef type _SLICE = model.ResourceSlice
cdef Py_ssize_t _S_DRIVER = _slot_offset(_SLICE, "driver")
cdef Py_ssize_t _S_POOL = _slot_offset(_SLICE, "pool")
cdef Py_ssize_t _S_DEVICES = _slot_offset(_SLICE, "devices")
cdef Py_ssize_t _S_COUNTERS = _slot_offset(_SLICE, "shared_counters")
cdef Py_ssize_t _S_GENERATION = _slot_offset(_SLICE, "generation")
cdef Py_ssize_t _S_COUNT = _slot_offset(_SLICE, "resource_slice_count")
cdef type _NODE = model.Node
cdef Py_ssize_t _N_NAME = _slot_offset(_NODE, "name")
cdef Py_ssize_t _N_TAINTS = _slot_offset(_NODE, "taints")
cdef Py_ssize_t _N_UNSCHEDULABLE = _slot_offset(_NODE, "unschedulable")
cdef Py_ssize_t _N_ALLOCATABLE = _slot_offset(_NODE, "allocatable")

# snapshot._NodeEntry's fields, in its order (all are copied into a projected entry).
_ENTRY_FIELDS = ("node", "labels", "local_pools", "local_slices", "sees_global", "key",
                 "free", "devices", "pristine", "fingerprint", "order", "exact", "ids")
cdef type _ENTRY = None
cdef Py_ssize_t[13] _E
cdef Py_ssize_t _E_NODE = -1, _E_POOLS = -1, _E_SLICES = -1, _E_GLOBAL = -1, _E_KEY = -1
cdef Py_ssize_t _E_FREE = -1, _E_PRISTINE = -1, _E_ORDER = -1, _E_EXACT = -1, _E_IDS = -1


cdef _entry_type(object entry_type):
    # Learn the entry type's slots; when one is not an object slot, or the type has
    # fields this module does not know, entries are read and made through Python.
    global _ENTRY, _E_NODE, _E_POOLS, _E_SLICES, _E_GLOBAL, _E_KEY, _E_FREE, _E_PRISTINE
    global _E_ORDER, _E_EXACT, _E_IDS
    if _ENTRY is entry_type:
        return
    _ENTRY = None
    if tuple(getattr(entry_type, "__slots__", ())) != _ENTRY_FIELDS:
        return
    cdef Py_ssize_t i
    for i in range(13):
        _E[i] = _slot_offset(entry_type, _ENTRY_FIELDS[i])
        if _E[i] <= 0:
            return
    _E_NODE, _E_POOLS, _E_SLICES, _E_GLOBAL, _E_KEY = _E[0], _E[2], _E[3], _E[4], _E[5]
    _E_FREE, _E_PRISTINE, _E_ORDER, _E_EXACT, _E_IDS = _E[6], _E[8], _E[10], _E[11], _E[12]
    _ENTRY = entry_type


cdef inline void _put(object o, Py_ssize_t offset, object value):
    # Set an empty slot of a new object.
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>o) + offset))[0] = <PyObject*>value


cdef object _projected_entry(object entry_type, object e, object key, object order):
    # entry_type(e.node, ..., e.fingerprint, order, e.key): the base entry's fields with
    # the projected class `key`, the canonical `order` and the base class as `exact`.
    cdef Py_ssize_t i
    cdef PyObject* v
    if not _SLOTS_OK or _ENTRY is None or type(e) is not _ENTRY or entry_type is not _ENTRY:
        return entry_type(e.node, e.labels, e.local_pools, e.local_slices, e.sees_global,
                          key, e.free, e.devices, e.pristine, e.fingerprint, order, e.key)
    for i in range(13):
        if (<PyObject**>((<char*><PyObject*>e) + _E[i]))[0] is NULL:
            return entry_type(e.node, e.labels, e.local_pools, e.local_slices,
                              e.sees_global, key, e.free, e.devices, e.pristine,
                              e.fingerprint, order, e.key)
    new = _OBJECT_NEW(entry_type)
    for i in range(10):
        if i != 5:
            _put(new, _E[i], <object>(<PyObject**>((<char*><PyObject*>e) + _E[i]))[0])
    _put(new, _E_KEY, key)
    _put(new, _E_ORDER, order)
    _put(new, _E_EXACT, <object>(<PyObject**>((<char*><PyObject*>e) + _E_KEY))[0])
    _put(new, _E_IDS, None)
    return new


def entry_slots_ok():
    """Whether index entries are read and projected ones made through their slots (once
    `project_entries` has met `snapshot._NodeEntry`, while device slots are read)."""
    return _SLOTS_OK and _ENTRY is not None


def slots_ok():
    """Whether device fields are read from their slots (else through getattr)."""
    return _SLOTS_OK


def read_slots(bint on):
    """Read device fields from their slots (when the check at import passed) or, `on`
    False, through getattr: for the tests and benchmarks that compare both."""
    global _SLOTS_OK
    _SLOTS_OK = False
    if on:
        _check_slots()


cdef inline bint _atomic_value(object x):
    # An int, string, boolean, None or untracked tuple: nothing a cycle can go through.
    return type(x) is int or type(x) is str or x is None or type(x) is bool or (
        type(x) is tuple and not PyObject_GC_IsTracked(x))


cdef inline tuple _atomic(tuple t):
    # The tuple, no longer tracked by the cyclic collector when it holds only atomic
    # values (`_atomic_value`) and tuples of them (pool keys such as (driver, pool),
    # made by Python code and still tracked): it cannot be part of a cycle. The collector
    # itself untracks such a tuple the first time it meets it; done here for the tuples
    # a cold decision keeps by the ten thousand, so that the first collection after the
    # decision does not walk them (`fitcore.inventory` pauses the collector meanwhile).
    cdef object x, y
    for x in t:
        if _atomic_value(x):
            continue
        if type(x) is not tuple:
            return t
        for y in <tuple>x:
            if not _atomic_value(y):
                return t
    PyObject_GC_UnTrack(<void*>t)
    return t


def acyclic(*objs):
    """The first of `objs`, with all of them left out of the cyclic collector: for
    objects a cold decision makes per node that cannot be part of a cycle (a node's
    index entry, its free resources, its class key: their contents never refer back to
    them). Reference counting still frees them; a dict is tracked again when a tracked
    object is put in it."""
    cdef object obj
    for obj in objs:
        if PyObject_GC_IsTracked(obj):
            PyObject_GC_UnTrack(<void*>obj)
    return objs[0]


cdef object _ZERO = Fraction(0)
cdef object _QUANTITY = values.Quantity
cdef object _FRACTION = Fraction
cdef object _OBJECT_NEW = object.__new__
# Where a device goes in a pool whose order is not observable (projection._canonical).
cdef object _CANONICAL = operator.itemgetter(0, 1, 2, 3)

# Fractions are read through their slots and whole ones made from them, not through
# Fraction's properties and constructor (Python code: most of the cost of the free
# resources of a node). Checked here against the documented API; when the slots are not
# there (another Python), the public API is used.
cdef bint _SLOTS = False
try:
    _f = object.__new__(Fraction)
    _f._numerator = 6
    _f._denominator = 1
    _SLOTS = (_f == Fraction(6) and hash(_f) == hash(Fraction(6)) and _f.numerator == 6
              and Fraction(3, 4)._numerator == 3 and Fraction(3, 4)._denominator == 4)
except AttributeError:
    _SLOTS = False


cdef inline object _num(object f):
    return f._numerator if _SLOTS else f.numerator


cdef inline object _den(object f):
    return f._denominator if _SLOTS else f.denominator


cdef object _whole(object n):
    # Fraction(n) for an int n. Its slots hold two ints: it cannot be part of a cycle,
    # so the collector need not track it (node entries keep one per resource in use).
    if not _SLOTS:
        return Fraction(n)
    f = _OBJECT_NEW(_FRACTION)
    f._numerator = n
    f._denominator = 1
    PyObject_GC_UnTrack(<void*>f)
    return f


cdef inline object _value(object q):
    # q.value of a Quantity (its slot: the property is Python code).
    return q._value if type(q) is _QUANTITY else q.value


# ------------------------------------------------------------------ the node's entry

cdef object _minus(object a, object b):
    # a - b, on the integers when both are whole (snapshot._minus).
    if type(a) is _FRACTION and type(b) is _FRACTION and _den(a) == 1 and _den(b) == 1:
        return _whole(_num(a) - _num(b))
    return a - b


# Sort keys made in C (a cdef function passed as a key is wrapped anew on every call).
cdef object _FIRST = operator.itemgetter(0)
cdef object _SLICE_NAME = operator.attrgetter("name")


def node_parts(object n, object used, list local, dict allocated_by_pool, str hostname):
    """What `Snapshot.entry` reads of a node and its node-local pools: (labels but the
    hostname, the pools sorted with their slices sorted by name, the slices in that
    order, the pools, free resources, nothing allocated locally). No device is read (the
    bound on local devices is counted for class representatives only). Reference:
    `snapshot._node_parts`."""
    cdef list labels = []
    cdef object k, v, q, s, pk, group
    cdef list groups = []
    cdef list local_slices = []
    cdef list local_pools = []
    cdef bint pristine = True
    cdef dict free
    for k, v in n.labels.items():
        if k != hostname:
            labels.append(_atomic((k, v)))
    labels.sort()
    if len(local) > 1:
        local = sorted(local, key=_FIRST)
    for pk, group in local:
        if len(group) > 1:
            group = sorted(group, key=_SLICE_NAME)
        groups.append((pk, group))
        local_pools.append(pk)
        local_slices.extend(group)
        if pristine and allocated_by_pool.get(pk):
            pristine = False
    free = {}
    for k, q in n.allocatable.items():
        free[k] = _value(q)
    for k, q in used.items():
        v = free.get(k)
        free[k] = _minus(_ZERO if v is None else v, _value(q))
    # The slices refer to nothing that refers back to the tuple of them (kept by the
    # node's entry): left out of the collector.
    cdef tuple slices = tuple(local_slices)
    PyObject_GC_UnTrack(<void*>slices)
    return (_atomic(tuple(labels)), groups, slices, _atomic(tuple(local_pools)), free,
            pristine)


def own_entry(object entry_type, dict keys, dict allocated_by_pool, object n, tuple parts,
              object own_class):
    """`Snapshot.entry(n, ..., own_class=own_class, parts=parts)` of a snapshot without
    pools that are not node-local: the node a class of its own (`("own", name,
    own_class)` interned in `keys`), `pristine` told from `allocated_by_pool`. The
    entry, its free resources and key are left out of the collector (`acyclic`)."""
    cdef object labels = parts[0], local_slices = parts[2], local_pools = parts[3]
    cdef object free = parts[4], pk, e
    cdef PyObject* hit
    cdef bint pristine = True
    for pk in local_pools:
        hit = PyDict_GetItem(allocated_by_pool, pk)
        if hit is not NULL and <object>hit:
            pristine = False
            break
    cdef tuple key = ("own", _slot(n, _N_NAME if _SLOTS_OK and type(n) is _NODE else -1,
                                   "name"), own_class)
    hit = PyDict_GetItem(keys, key)
    cdef object cid
    if hit is NULL:
        cid = len(keys)
        keys[key] = cid
    else:
        cid = <object>hit
    _entry_type(entry_type)
    if _SLOTS_OK and _ENTRY is entry_type:
        e = _OBJECT_NEW(entry_type)
        _put(e, _E[0], n)
        _put(e, _E[1], labels)
        _put(e, _E_POOLS, local_pools)
        _put(e, _E_SLICES, local_slices)
        _put(e, _E_GLOBAL, False)
        _put(e, _E_KEY, cid)
        _put(e, _E_FREE, free)
        _put(e, _E[7], None)
        _put(e, _E_PRISTINE, pristine)
        _put(e, _E[9], ())
        _put(e, _E_ORDER, None)
        _put(e, _E_EXACT, -1)
        _put(e, _E_IDS, None)
    else:
        e = entry_type(n, labels, local_pools, local_slices, False, cid, free, None,
                       pristine)
    return acyclic(e, free, key)


# --------------------------------------------------------- the node under a projection

cdef tuple _observed(dict layouts, object proj, object a):
    # (kept, renamed) names of the device's attributes (Projection._layout), and the
    # kept ones as (name, type, value).
    cdef tuple names = tuple(a)
    cdef object layout
    cdef PyObject* hit = PyDict_GetItem(layouts, names)
    if hit is NULL:
        layout = proj._layout(names)
    else:
        layout = <object>hit
    cdef tuple kept = layout[0]
    cdef Py_ssize_t i, m = len(kept)
    cdef object v, name
    if m == 0:
        return (), layout[1]
    if m == 1:
        name = kept[0]
        v = a[name]
        return ((name, type(v), v),), layout[1]
    cdef list out = []
    for i in range(m):
        name = kept[i]
        v = a[name]
        out.append((name, type(v), v))
    return tuple(out), layout[1]


cdef object _state_text(dict states, object state_of, object st):
    cdef PyObject* hit = PyDict_GetItem(states, st)
    if hit is not NULL:
        found = <object>hit
        if found:
            return found
    return state_of(st)


cdef bint _same_names(object a, tuple names):
    # Whether the dict `a` has exactly these keys, in this order (no tuple made).
    cdef Py_ssize_t pos = 0, i = 0, m = len(names)
    cdef PyObject* key
    cdef PyObject* value
    if type(a) is not dict or PyDict_Size(a) != m:
        return False
    while PyDict_Next(a, &pos, &key, &value):
        if key is not <PyObject*>names[i] and <object>key != names[i]:
            return False
        i += 1
    return True


cdef tuple _unordered(object proj, str driver, object devices, dict state, dict states,
                      object state_of, set names):
    # Projection._unordered: the candidates of a pool without counters. Devices of a pool
    # mostly look alike but for their names and unique attributes: what the previous
    # device's attribute names, observable values and other content gave is reused when
    # they are the same (the same answers the kept maps would give).
    cdef list out = []
    cdef Py_ssize_t candidates = 0
    cdef bint unbounded = False
    cdef bint skip = proj._attributes_only
    cdef dict relevant = proj._relevant
    cdef dict layouts = proj._layouts
    cdef dict selectable = proj._selectable
    cdef dict rests = proj._rests
    cdef dict intern = proj._intern
    cdef dict labels = proj._labels
    cdef object d, a, ok, k, label, w, st, allow
    cdef tuple observed, relabeled, got, kl, kept
    cdef PyObject* hit
    # The previous device's: attribute names and layout, observable values and whether a
    # selector may take it, content besides attributes, key, candidacy.
    cdef tuple prev_names = None, prev_layout = None, prev_observed = None
    cdef object prev_ok = None, prev_k = None, prev_w = None
    cdef object prev_capacity = None, prev_consumed = None, prev_taints = None
    cdef object prev_allow = None, prev_binding = None, prev_binds = None
    cdef object capacity, consumed, taints, binding, binds
    # The key of the last device keyed here, with its observable values (prev_capacity..
    # prev_binds are its content).
    cdef object same_k = None
    cdef tuple same_observed = None
    cdef object v, name
    cdef object empty_text = _state_text(states, state_of, ())
    cdef object device_name
    cdef bint fast
    for d in devices:
        fast = _SLOTS_OK and type(d) is _DEVICE
        device_name = _field(d, fast, _D_NAME, "name")
        consumed = _field(d, fast, _D_CONSUMES, "consumes_counters")
        if names is not None:
            if consumed:
                return None
            names.add(device_name)
        a = _field(d, fast, _D_ATTRIBUTES, "attributes")
        if prev_names is None or not _same_names(a, prev_names):
            prev_names = tuple(a)
            hit = PyDict_GetItem(layouts, prev_names)
            prev_layout = proj._layout(prev_names) if hit is NULL else <tuple>hit
        kept = prev_layout[0]
        relabeled = prev_layout[1]
        if len(kept) == 0:
            observed = ()
        elif len(kept) == 1:
            name = kept[0]
            v = a[name]
            if prev_observed is not None and len(prev_observed) == 1 and \
                    (<tuple>prev_observed[0])[0] is name and \
                    (<tuple>prev_observed[0])[1] is type(v) and \
                    (<tuple>prev_observed[0])[2] == v:
                observed = prev_observed
            else:
                observed = ((name, type(v), v),)
        else:
            observed = _observed(layouts, proj, a)[0]
            if prev_observed is not None and observed == prev_observed:
                observed = prev_observed
        if skip:
            if observed is not prev_observed or prev_ok is None:
                hit = PyDict_GetItem(selectable, (driver, observed))
                if hit is NULL:
                    ok = proj._maybe_selectable(driver, d, observed)
                else:
                    ok = <object>hit
            else:
                ok = prev_ok
            prev_ok = ok
            if not ok:
                prev_observed = observed
                continue
        # The device's key. Not looked up in nor kept with the projection's device keys
        # (as the reference's are): a device like the previous one of its pool costs its
        # label only, the first of its kind an interning, both less than keeping an
        # entry per device of the cluster would.
        capacity = _field(d, fast, _D_CAPACITY, "capacity")
        taints = _field(d, fast, _D_TAINTS, "taints")
        allow = _field(d, fast, _D_ALLOW, "allow_multiple_allocations")
        binding = _field(d, fast, _D_BINDING, "binding_conditions")
        binds = _field(d, fast, _D_BINDS, "binds_to_node")
        if same_k is not None and observed is same_observed and \
                capacity is prev_capacity and consumed is prev_consumed and \
                (taints is prev_taints or taints == prev_taints) and \
                allow == prev_allow and \
                (binding is prev_binding or binding == prev_binding) and \
                binds == prev_binds:
            # The same key as the previous device's: only its label is its own.
            k = same_k
            label = _label(a, relabeled, labels) if relabeled else None
        else:
            kl = _device_key(proj, driver, d, observed, relabeled, rests, intern, labels)
            k = kl[0]
            label = kl[1]
            prev_capacity, prev_consumed, prev_taints = capacity, consumed, taints
            prev_allow, prev_binding, prev_binds = allow, binding, binds
            same_k, same_observed = k, observed
        prev_observed = observed
        if k is prev_k and prev_w is not None:
            w = prev_w
        else:
            hit = PyDict_GetItem(relevant, k)
            if hit is NULL:
                w = proj._candidate(k, driver, d)
            else:
                w = <object>hit
        prev_k, prev_w = k, w
        if not w:
            continue
        if allow:
            unbounded = True
        else:
            candidates += 1
        if state:
            hit = PyDict_GetItem(state, device_name)
        else:
            hit = NULL
        if hit is NULL:
            out.append((k, empty_text, label, device_name, ()))
        else:
            st = <object>hit
            out.append((k, _state_text(states, state_of, st), label, device_name, st))
    return out, candidates, unbounded


cdef tuple _device_key(object proj, str driver, object d, tuple observed, tuple relabeled,
                       dict rests, dict intern, dict labels):
    # Projection._device_key's answer, (key, label), without keeping it per device. A
    # device whose capacity and counter maps (with the rest) were not interned yet goes
    # to the reference, which interns them (and keeps its answer).
    capacity = d.capacity
    consumed = d.consumes_counters
    cdef tuple shared = (id(capacity), id(consumed), d.taints, d.allow_multiple_allocations,
                         d.binding_conditions, d.binds_to_node)
    cdef PyObject* hit = PyDict_GetItem(rests, shared)
    if hit is NULL or (<tuple>hit)[0] is not capacity or (<tuple>hit)[1] is not consumed:
        return proj._device_key(driver, d, observed, relabeled)
    rest = (<tuple>hit)[2]
    key = ("dev", driver, observed, rest)
    hit = PyDict_GetItem(intern, key)
    if hit is NULL:
        k = intern.setdefault(key, len(intern))
    else:
        k = <object>hit
    cdef object label = None
    if relabeled:
        label = _label(d.attributes, relabeled, labels)
    return (k, label)


# Texts of one renamed attribute's string values, by attribute name and value: the
# common case of `_label` without a key tuple per device. A text is a function of the
# name and value only, so this is shared by every projection (and cleared when large).
cdef dict _STR_LABELS = {}
cdef Py_ssize_t _STR_LABELS_SIZE = 0


cdef object _label(object a, tuple relabeled, dict labels):
    # Projection._label: the device's values of the renamed attribute, as text.
    global _STR_LABELS_SIZE
    cdef list parts
    cdef object name, v, key, found, by_value
    cdef PyObject* hit
    if len(relabeled) == 1:
        name = relabeled[0]
        v = a[name]
        if type(v) is str:
            hit = PyDict_GetItem(_STR_LABELS, name)
            if hit is not NULL:
                hit = PyDict_GetItem(<dict>hit, v)
                if hit is not NULL:
                    return <object>hit
            found = f"{name}={v!r}"
            if _STR_LABELS_SIZE > 65536:
                _STR_LABELS.clear()
                _STR_LABELS_SIZE = 0
            by_value = _STR_LABELS.get(name)
            if by_value is None:
                by_value = _STR_LABELS[name] = {}
            by_value[v] = found
            _STR_LABELS_SIZE += 1
            return found
    parts = []
    for name in relabeled:
        v = a[name]
        key = (name, type(v), v)
        hit = PyDict_GetItem(labels, key)
        if hit is NULL:
            found = labels[key] = f"{name}={v!r}"
        else:
            found = <object>hit
        parts.append(found)
    if len(parts) == 1:
        return parts[0]
    return "\n".join(parts)


cdef bint _none_selectable(object proj, str driver, object devices):
    # Whether no device of a counter pool passes the selectors, as far as the driver and
    # its observable attributes tell (the early answer of Projection._ordered_pool). The
    # devices of such a pool (MIG partitions: the most devices of a cluster) mostly
    # publish the same attribute names and observable values as the previous one: then
    # its answer is the previous one's, found without a tuple made.
    cdef dict layouts = proj._layouts
    cdef dict selectable = proj._selectable
    cdef tuple names = None, layout = None, kept, observed, prev = None, only
    cdef PyObject* hit
    cdef object ok, a, v, name
    for d in devices:
        a = _field(d, _SLOTS_OK and type(d) is _DEVICE, _D_ATTRIBUTES, "attributes")
        if names is None or not _same_names(a, names):
            names = tuple(a)
            hit = PyDict_GetItem(layouts, names)
            layout = proj._layout(names) if hit is NULL else <tuple>hit
        kept = layout[0]
        # The answer is the driver's and the observed values' (whatever other names the
        # device publishes): the same as the previous device's when they are.
        if len(kept) == 0 and prev is not None and len(prev) == 0:
            continue
        if len(kept) == 1 and prev is not None and len(prev) == 1:
            name = kept[0]
            v = a[name]
            only = <tuple>prev[0]
            if only[0] is name and only[1] is type(v) and only[2] == v:
                continue  # as the previous device: not selectable
        observed = _observed(layouts, proj, a)[0]
        if prev is not None and observed == prev:
            continue
        hit = PyDict_GetItem(selectable, (driver, observed))
        if hit is NULL:
            ok = proj._maybe_selectable(driver, d, observed)
        else:
            ok = <object>hit
        if ok:
            return False
        prev = observed
    return True


cdef tuple _pool(object proj, object view, tuple pk, list slices, object taken,
                 dict states, object state_of):
    # Projection._pool: (ordered, shape, items, candidates, unbounded).
    cdef str driver = pk[0]
    cdef dict state = {}
    cdef object t, s, d, c, prev
    cdef list devices_list
    cdef object devices
    cdef list counters = []
    cdef set names = set()
    cdef Py_ssize_t count = 0
    cdef bint has_consumes = False
    for t in taken:
        prev = state.get(t[1], ())
        state[t[1]] = _atomic((*prev, t[0], *t[2:]))
    cdef bint fast_s
    if len(slices) == 1:
        s = slices[0]
        devices = _slot(s, _S_DEVICES if _SLOTS_OK and type(s) is _SLICE else -1, "devices")
    else:
        devices_list = []
        for s in slices:
            devices_list.extend(
                _slot(s, _S_DEVICES if _SLOTS_OK and type(s) is _SLICE else -1, "devices"))
        devices = devices_list
    cdef list gens = []
    for s in slices:
        fast_s = _SLOTS_OK and type(s) is _SLICE
        for c in _slot(s, _S_COUNTERS if fast_s else -1, "shared_counters"):
            counters.append((c.name, tuple(sorted(c.counters.items()))))
        gens.append(_atomic((_slot(s, _S_GENERATION if fast_s else -1, "generation"),
                             _slot(s, _S_COUNT if fast_s else -1, "resource_slice_count"),
                             len(_slot(s, _S_DEVICES if fast_s else -1, "devices")))))
    counters.sort()
    cdef tuple counters_t = tuple(counters)
    cdef bint view_ordered = view.ordered
    cdef tuple got
    if not view_ordered and not counters_t:
        # Most pools: their device names are gathered in the same pass (None: a device
        # consumes counters, the pool is kept in order after all).
        got = _unordered(proj, driver, devices, state, states, state_of, names)
        if got is not None:
            return (False, _atomic((driver, _atomic(tuple(gens)), counters_t,
                                    len(names) == len(devices))),
                    *got)
        names.clear()
    cdef bint fast
    for d in devices:
        fast = _SLOTS_OK and type(d) is _DEVICE
        names.add(_field(d, fast, _D_NAME, "name"))
        count += 1
        if not has_consumes and _field(d, fast, _D_CONSUMES, "consumes_counters"):
            has_consumes = True
    cdef bint unique = len(names) == count
    cdef tuple info = _atomic((driver, _atomic(tuple(gens)), counters_t, unique))
    cdef bint ordered = view_ordered or bool(counters_t) or has_consumes
    if not ordered:
        return (False, info, *_unordered(proj, driver, devices, state, states, state_of, None))
    # Pools with counters (or every pool of an ordered view): the reference's own
    # method, which these are few enough not to matter.
    if not view_ordered and proj._attributes_only and _none_selectable(proj, driver, devices):
        # No device of this counter pool can be taken: none is observable.
        return ordered, _atomic((info[0], info[1], (), info[3])), [], 0, False
    return proj._ordered_pool(driver, devices, state, info, counters_t)


cdef dict _ranks(list pools):
    # Projection._ranks.
    cdef dict groups = {}
    cdef Py_ssize_t pi = 0
    cdef tuple p, it
    cdef object label, members
    for p in pools:
        for it in p[3]:
            label = it[2]
            if label is not None:
                members = groups.get(label)
                if members is None:
                    members = groups[label] = []
                members.append((pi, it[0], it[1]))
        pi += 1
    cdef list ranked = []
    for label, members in groups.items():
        ranked.append((tuple(sorted(members)), label))
    ranked.sort()
    cdef dict rank = {None: -1}
    cdef Py_ssize_t i = 0
    for p in ranked:
        rank[p[1]] = i
        i += 1
    return rank


cdef list _by_pool(object local_slices, object local_pools):
    # The node's slices pool by pool, in the order of its pools. A node's entry lists
    # them so (`node_parts`): split in one pass comparing each slice's driver and pool
    # with the pool's (the same strings, mostly), without a key tuple per slice; grouped
    # through a dict when they are not in that order.
    cdef list out = []
    cdef Py_ssize_t i = 0, n = len(local_slices)
    cdef object s, pk, driver, pool, key, lst
    cdef list group
    cdef bint fast
    cdef dict by_pool
    for pk in local_pools:
        driver = (<tuple>pk)[0]
        pool = (<tuple>pk)[1]
        group = []
        while i < n:
            s = local_slices[i]
            fast = _SLOTS_OK and type(s) is _SLICE
            key = _slot(s, _S_DRIVER if fast else -1, "driver")
            if key is not driver and key != driver:
                break
            key = _slot(s, _S_POOL if fast else -1, "pool")
            if key is not pool and key != pool:
                break
            group.append(s)
            i += 1
        if not group:
            break
        out.append(group)
    if i == n and len(out) == len(local_pools):
        return out
    by_pool = {}
    for s in local_slices:
        key = (s.driver, s.pool)
        lst = by_pool.get(key)
        if lst is None:
            lst = by_pool[key] = []
        lst.append(s)
    return [by_pool[pk] for pk in local_pools]


cdef tuple _devices(object proj, object local_slices, object local_pools, tuple taken,
                    dict states, object state_of):
    # Projection._devices: per pool its shape and observable devices, the devices in
    # canonical order, candidates, unbounded. `taken`: per pool its allocation table.
    cdef list groups = _by_pool(local_slices, local_pools)
    cdef list pools = []
    cdef Py_ssize_t candidates = 0, i = 0
    cdef bint unbounded = False
    cdef object view = proj.view
    cdef tuple got
    cdef object pk
    for pk in local_pools:
        got = _pool(proj, view, pk, groups[i], taken[i], states, state_of)
        i += 1
        pools.append((pk, got[0], got[1], got[2]))
        candidates += got[3]
        unbounded = unbounded or got[4]
    cdef dict rank = _ranks(pools) if view.relabel is not None else None
    cdef list key_parts = [], order = [], items, parts, names
    cdef tuple p, it
    for p in pools:
        items = p[3]
        if rank is not None:
            items = [(it[0], it[1], rank[it[2]], it[3], it[4]) for it in items]
        if not p[1]:
            if p[2][3]:
                # Unique device names: no two items tie on the canonical key, so the
                # items sort alike by themselves (no key tuples made).
                items.sort()
            else:
                items.sort(key=_CANONICAL)
        parts = []
        names = []
        for it in items:
            parts.append(it[0])
            parts.append(it[4])
            parts.append(it[2])
            names.append(it[3])
        key_parts.append(_atomic((p[2], _atomic(tuple(parts)))))
        order.append(_atomic((p[0], _atomic(tuple(names)))))
    return _atomic((_atomic(tuple(key_parts)), _atomic(tuple(order)), candidates, unbounded))


cdef tuple _free(tuple free_view, dict node_free, object most):
    # Projection._free.
    cdef list out = []
    cdef tuple f
    cdef object name, amount, have, n
    cdef PyObject* hit
    for f in free_view:
        name = f[0]
        amount = f[1]
        hit = PyDict_GetItem(node_free, name)
        if hit is NULL:
            out.append((name, None))
            continue
        have = <object>hit
        if f[3]:
            if _num(have) * _den(amount) <= _num(amount) * _den(have):
                out.append((name, have))
            else:
                out.append((name, amount))
        else:
            if _num(have) > 0:
                n = min((_num(have) * _den(amount)) // (_den(have) * _num(amount)), f[2])
            else:
                n = 0
            out.append(_atomic((name, n if most is None else min(n, most))))
    return _atomic(tuple(out))


def project_entries(object proj, list entries, dict kept, Py_ssize_t limit,
                    object allocated, dict states, object state_of, object entry_type):
    """`Projection.entries`: every entry under the projection, kept per node while its
    base entry is the same object (reference: `Projection._entries`). `entry_type`:
    `snapshot._NodeEntry`."""
    cdef list out = []
    cdef object e, name, projected, node
    cdef tuple found, both
    cdef PyObject* hit
    cdef bint fast
    _entry_type(entry_type)
    for e in entries:
        fast = _SLOTS_OK and _ENTRY is not None and type(e) is _ENTRY
        node = _slot(e, _E_NODE if fast else -1, "node")
        name = _slot(node, _N_NAME if _SLOTS_OK and type(node) is _NODE else -1, "name")
        hit = PyDict_GetItem(kept, name)
        if hit is not NULL and (<tuple>hit)[0] is e:
            out.append((<tuple>hit)[1])
            continue
        if len(kept) > limit:
            kept.clear()
        if _slot(e, _E_GLOBAL if fast else -1, "sees_global"):
            projected = e
        else:
            found = node_key(proj, e, allocated, states, state_of)
            projected = _projected_entry(entry_type, e, found[0], found[1])
            # Acyclic, kept by the ten thousand (Projection.entry).
            if PyObject_GC_IsTracked(projected):
                PyObject_GC_UnTrack(<void*>projected)
        both = (e, projected)
        PyObject_GC_UnTrack(<void*>both)
        kept[name] = both
        out.append(projected)
    return out


def node_key(object proj, object e, object allocated, dict states, object state_of):
    """`Projection.node_key`: the node's class under the projection and its devices in
    canonical order. `states`, `state_of`: the kept state texts and the function that
    makes one (`projection._STATES`, `projection._state`)."""
    cdef list taken = []
    cdef object pk, a, b
    cdef bint fast = _SLOTS_OK and _ENTRY is not None and type(e) is _ENTRY
    cdef object node = _slot(e, _E_NODE if fast else -1, "node")
    cdef bint fast_node = _SLOTS_OK and type(node) is _NODE
    cdef object local_pools = _slot(e, _E_POOLS if fast else -1, "local_pools")
    cdef object local_slices = _slot(e, _E_SLICES if fast else -1, "local_slices")
    cdef PyObject* got
    if type(allocated) is dict:
        for pk in local_pools:
            got = PyDict_GetItem(<dict>allocated, pk)
            taken.append(<object>got if got is not NULL else ())
    else:
        for pk in local_pools:
            taken.append(allocated.get(pk, ()))
    cdef tuple taken_t = tuple(taken)
    cdef dict parts = proj._parts
    cdef str name = _slot(node, _N_NAME if fast_node else -1, "name")
    cdef object hit = parts.get(name)
    cdef bint stale = hit is None
    cdef tuple kept
    cdef Py_ssize_t i
    if not stale:
        if (<tuple>hit)[0] is not local_slices:
            stale = True
        else:
            kept = (<tuple>hit)[1]
            if len(kept) != len(taken_t):
                stale = True
            else:
                for i in range(len(kept)):
                    if kept[i] is not taken_t[i]:
                        stale = True
                        break
    if stale:
        hit = (local_slices, taken_t, _devices(proj, local_slices, local_pools, taken_t,
                                               states, state_of))
        # Slices, allocation lists and the part refer to nothing that refers back to it
        # (nor to the tuple of the lists).
        PyObject_GC_UnTrack(<void*>hit)
        PyObject_GC_UnTrack(<void*>taken_t)
        parts[name] = hit
    cdef tuple part = (<tuple>hit)[2]
    cdef Py_ssize_t candidates = part[2]
    cdef bint unbounded = part[3]
    cdef Py_ssize_t per_pod = proj._per_pod
    cdef object most = None
    if not unbounded and per_pod:
        most = max(candidates // per_pod, 1)
    cdef tuple extended = proj._extended
    cdef object advertised = ()
    cdef list adv
    cdef object allocatable
    if extended:
        allocatable = _slot(node, _N_ALLOCATABLE if fast_node else -1, "allocatable")
        adv = []
        for a in extended:
            b = allocatable.get(a)
            adv.append(bool(_value(b)) if b is not None else False)
        advertised = tuple(adv)
    key = _atomic(("node", part[0], _slot(node, _N_TAINTS if fast_node else -1, "taints"),
                   _slot(node, _N_UNSCHEDULABLE if fast_node else -1, "unschedulable"),
                   _slot(e, _E_PRISTINE if fast else -1, "pristine"),
                   _free(proj.free, _slot(e, _E_FREE if fast else -1, "free"), most),
                   advertised))
    cdef dict intern = proj._intern
    cdef object found = intern.get(key)
    if found is None:
        found = intern.setdefault(key, len(intern))
    return found, part[1]


# ------------------------------------------------------------------ the view's index

def insert_all(object snap, object entries):
    """`Snapshot.insert` of each entry in order (label groups, cells, class
    representatives), for a view of every node (`Snapshot.with_entries`)."""
    cdef list out = snap.entries
    cdef dict group_index = snap._group_index
    cdef list label_groups = snap.label_groups
    cdef list group_nodes = snap.group_nodes
    cdef set own = snap._own_groups
    cdef list node_group = snap.node_group
    cdef dict cells = snap.cells
    cdef dict class_rep = snap.class_rep
    cdef object e, group, cid, cell, members
    cdef PyObject* hit
    cdef Py_ssize_t index
    for e in entries:
        index = len(out)
        hit = PyDict_GetItem(group_index, e.labels)
        if hit is NULL:
            group = len(label_groups)
            group_index[e.labels] = group
            label_groups.append(e.node.labels)
            members = []
            group_nodes.append(members)
            own.add(group)
        else:
            group = <object>hit
            if group not in own:  # copy on write (extended snapshots)
                group_nodes[group] = list(group_nodes[group])
                own.add(group)
            members = group_nodes[group]
        members.append(index)
        node_group.append(group)
        cid = e.key
        cell = (group, cid)
        hit = PyDict_GetItem(cells, cell)
        cells[cell] = 1 if hit is NULL else <object>hit + 1
        if PyDict_GetItem(class_rep, cid) is NULL:
            class_rep[cid] = index
        out.append(e)
