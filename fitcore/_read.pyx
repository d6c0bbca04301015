# Compiled reading of what an inventory reads on every event. The Python functions are
# the reference, and tests/fitcore/test_compiled_reading.py holds the two to the same
# answers: `Schema.unknown_fields` is fitcore/schema.py `_unknown_fields` (the same walk
# over the same tables), `DeviceReader.read` is fitcore/kube.py `_common_device` of each
# device (the same checks, the same caches and helpers for what is not kept yet).
#
# What is faster here than in Python: dict walks in C (key checks with PyDict_Next and set
# lookups), devices built slot by slot, and a device's other fields (capacity, counters,
# taints, ...) compared with the previous device's instead of turned into a cache key:
# the devices of one slice nearly always share them.

import dataclasses
from collections.abc import Mapping

from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject, PyObject_GenericSetAttr
from cpython.set cimport PySet_Contains

cdef object _STR = type("")
cdef object _INT = type(0)
cdef object _BOOL = type(True)
cdef object _DICT = type({})
cdef object _LIST = type([])
cdef object _INT64_MIN = -(2 ** 63)
cdef object _INT64_END = 2 ** 63
# Values nested deeper than this are not compared (the device goes the slow way).
cdef int _SAME_DEPTH = 32


cdef bint _keys_in(dict d, frozenset allowed) except -1:
    """`d.keys() <= allowed`."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    if len(d) > len(allowed):
        return False
    while PyDict_Next(d, &pos, &key, &value):
        if not PySet_Contains(allowed, <object>key):
            return False
    return True


cdef bint _only_leaves(object value, object form, frozenset leaves) except -1:
    """Whether a field's value (an object, or a list or map of objects) holds objects with
    only these leaf fields (schema.py `_only_leaves`)."""
    cdef object kind = type(value)
    cdef object v
    cdef Py_ssize_t pos = 0
    cdef PyObject* k
    cdef PyObject* item
    if form == "model":
        return kind is _DICT and _keys_in(<dict>value, leaves)
    if form == "list" and kind is _LIST:
        for v in <list>value:
            if type(v) is not _DICT or not _keys_in(<dict>v, leaves):
                return False
        return True
    if form == "dict" and kind is _DICT:
        while PyDict_Next(<dict>value, &pos, &k, &item):
            if type(<object>item) is not _DICT or not _keys_in(<dict><object>item, leaves):
                return False
        return True
    return False


cdef class Schema:
    """The unknown-field walk over fitcore/schema.py's tables."""

    def __init__(self, dict shapes, dict leaves, dict fields, shape_of, leaves_of, fields_of,
                 render):
        self.shapes = shapes
        self.leaves = leaves
        self.fields = fields
        self.shape_of = shape_of
        self.leaves_of = leaves_of
        self.fields_of = fields_of
        self.render = render

    cdef tuple _shape(self, str typ):
        found = self.shapes.get(typ)
        if found is None:
            found = self.shape_of(typ)
        return <tuple?>found

    cpdef list unknown_fields(self, object obj, str model, object path=""):
        """Paths of every field of `obj` that `model` does not declare, sorted."""
        cdef list out = []
        cdef list todo = [(obj, model, path)]
        cdef tuple item, shape, found
        cdef object value, where, form, inner, key, sub, leaves, held, rendered
        cdef str typ
        cdef dict fields
        cdef Py_ssize_t i
        while todo:
            item = <tuple?>todo.pop()
            value = item[0]
            typ = <str?>item[1]
            where = item[2]
            shape = self._shape(typ)
            form = shape[0]
            if form == "skip":
                continue
            if form == "list":
                if isinstance(value, list):
                    inner = shape[1]
                    for i, sub in enumerate(value):
                        todo.append((sub, inner, (where, 1, i)))
                continue
            if not (type(value) is _DICT or isinstance(value, Mapping)):
                continue
            if form == "dict":
                inner = shape[1]
                for key, sub in value.items():
                    todo.append((sub, inner, (where, 2, key)))
                continue
            if type(value) is _DICT:
                leaves = self.leaves.get(typ)
                if leaves is None:
                    leaves = self.leaves_of(typ)
                if _keys_in(<dict>value, <frozenset?>leaves):
                    continue
            fields = self.fields.get(typ)
            if fields is None:
                fields = self.fields_of(typ)
            for key, sub in value.items():
                found = fields.get(key) if isinstance(key, str) else None
                if found is None:
                    rendered = self.render(where)
                    out.append(f"{rendered}.{key}" if rendered else str(key))
                    continue
                if found[1] == "skip":
                    continue
                held = found[2]
                if held is None or not _only_leaves(sub, found[1], <frozenset?>held):
                    todo.append((sub, found[0], (where, 0, key)))
        out.sort()
        return out


cdef bint _same(object a, object b, int depth) except -1:
    """Whether two JSON values have the same repr (so the same cache key in
    kube.py `_rest`): the same types throughout, equal, dicts in the same order. False when
    unsure (floats, other types, deep nesting): the caller then reads the slow way."""
    cdef object t
    cdef Py_ssize_t i = 0, j = 0, n
    cdef PyObject *ka
    cdef PyObject *va
    cdef PyObject *kb
    cdef PyObject *vb
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is _STR or t is _INT or t is _BOOL:
        return a == b
    if depth >= _SAME_DEPTH:
        return False
    if t is _DICT:
        if len(<dict>a) != len(<dict>b):
            return False
        while PyDict_Next(<dict>a, &i, &ka, &va):
            if not PyDict_Next(<dict>b, &j, &kb, &vb):
                return False
            if not _same(<object>ka, <object>kb, depth + 1) or not _same(
                    <object>va, <object>vb, depth + 1):
                return False
        return True
    if t is _LIST:
        n = len(<list>a)
        if n != len(<list>b):
            return False
        for i in range(n):
            if not _same((<list>a)[i], (<list>b)[i], depth + 1):
                return False
        return True
    return False


cdef bint _next_other(dict d, Py_ssize_t* pos, PyObject** key, PyObject** value) except -1:
    """The next item of a device other than its name and attributes."""
    while PyDict_Next(d, pos, key, value):
        if <object>key[0] == "name" or <object>key[0] == "attributes":
            continue
        return True
    return False


cdef bint _same_other(dict a, dict b) except -1:
    """Whether two devices' fields other than name and attributes are the same (`_same`),
    in the same order."""
    cdef Py_ssize_t i = 0, j = 0
    cdef PyObject *ka
    cdef PyObject *va
    cdef PyObject *kb
    cdef PyObject *vb
    cdef bint more_a, more_b
    while True:
        more_a = _next_other(a, &i, &ka, &va)
        more_b = _next_other(b, &j, &kb, &vb)
        if more_a != more_b:
            return False
        if not more_a:
            return True
        if not _same(<object>ka, <object>kb, 0) or not _same(<object>va, <object>vb, 0):
            return False


cdef object _ABSENT = object()  # a field `rest` does not give


cdef class DeviceReader:
    """Devices of the common form, read as fitcore/kube.py `_common_device` reads them."""

    def __init__(self, set names, set attribute_names, name_ok, attribute_ok, rest_of,
                 parse_version, device_type):
        """Devices are built slot by slot when `device_type` (a dataclass) has slots, no
        __post_init__ and a default for every field other than name and attributes, as
        its __init__ would build them; else by calling it."""
        self.names = names
        self.attribute_names = attribute_names
        self.name_ok = name_ok
        self.attribute_ok = attribute_ok
        self.rest_of = rest_of
        self.parse_version = parse_version
        self.device_type = device_type
        slots, defaults = [], []
        self.by_slots = hasattr(device_type, "__slots__") and not hasattr(
            device_type, "__post_init__")
        for f in dataclasses.fields(device_type):
            slots.append(f.name)
            if f.name in ("name", "attributes"):
                defaults.append(None)
            elif f.default is not dataclasses.MISSING:
                defaults.append((False, f.default))
            elif f.default_factory is not dataclasses.MISSING:
                defaults.append((True, f.default_factory))
            else:
                self.by_slots = False
                defaults.append(None)
        self.slots = tuple(slots)
        self.defaults = tuple(defaults)

    cdef object _one(self, object obj, object previous, object previous_rest, list found):
        """The device, or None for the strict reader. `found[0]` is set to what its other
        fields read as, for the next device to share when its are the same."""
        cdef dict d, attributes
        cdef object name, raw_attributes, key, raw, kind, value, kind_of, rest
        cdef Py_ssize_t pos
        cdef PyObject* k
        cdef PyObject* v
        if type(obj) is not _DICT:
            return None
        d = <dict>obj
        name = d.get("name")
        if type(name) is not _STR:
            return None
        if not PySet_Contains(self.names, name) and not self.name_ok(name):
            return None
        attributes = {}
        raw_attributes = d.get("attributes")
        if raw_attributes is not None:
            if type(raw_attributes) is not _DICT:
                return None
            for key, raw in (<dict>raw_attributes).items():
                if type(key) is not _STR or (not PySet_Contains(self.attribute_names, key)
                                             and not self.attribute_ok(key)):
                    return None
                if type(raw) is not _DICT or len(<dict>raw) != 1:
                    return None
                pos = 0
                PyDict_Next(<dict>raw, &pos, &k, &v)
                kind = <object>k
                value = <object>v
                kind_of = type(value)
                if kind == "string":
                    if kind_of is not _STR or len(<str>value) > 64:
                        return None
                elif kind == "int":
                    if kind_of is not _INT or not (_INT64_MIN <= value < _INT64_END):
                        return None
                elif kind == "bool":
                    if kind_of is not _BOOL:
                        return None
                elif kind == "version" and kind_of is _STR and len(<str>value) <= 64:
                    try:
                        value = self.parse_version(value)
                    except ValueError:
                        return None
                else:
                    return None
                attributes[key] = value
        if previous is not None and _same_other(d, <dict>previous):
            rest = previous_rest
        else:
            rest = self.rest_of(d)
            if rest is None:
                return None
        found[0] = rest
        if len(attributes) + len(rest["capacity"]) > 32:
            return None
        return self._build(<str>name, attributes, <dict?>rest)

    cdef object _build(self, str name, dict attributes, dict rest):
        """model.Device(name=name, attributes=attributes, **rest)."""
        cdef object device, slot, value
        cdef tuple default
        cdef Py_ssize_t i
        if not self.by_slots:
            return self.device_type(name=name, attributes=attributes, **rest)
        device = object.__new__(self.device_type)
        for i in range(len(self.slots)):
            slot = self.slots[i]
            if slot == "name":
                value = name
            elif slot == "attributes":
                value = attributes
            else:
                value = rest.get(slot, _ABSENT)
                if value is _ABSENT:
                    default = <tuple>self.defaults[i]
                    value = default[1]() if default[0] else default[1]
            PyObject_GenericSetAttr(device, slot, value)
        return device

    cpdef list read(self, list devices):
        """Each device read (a model.Device), or None where the strict reader must read
        it (not of the common form, or not valid)."""
        cdef list out = [None] * len(devices)
        cdef list found = [None]
        cdef object previous = None, previous_rest = None, obj
        cdef Py_ssize_t i
        for i in range(len(devices)):
            obj = devices[i]
            found[0] = None
            out[i] = self._one(obj, previous, previous_rest, found)
            if found[0] is not None:
                previous, previous_rest = obj, found[0]
        return out
