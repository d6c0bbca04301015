# Compiled reading of what an inventory reads on every event: the strict unknown-field
# walk (reference: fitcore/schema.py `_unknown_fields`) and devices of the common form
# (reference: fitcore/kube.py `_common_device`). Both work on Python objects (the JSON
# dicts of a watch event), so nothing here runs without the GIL.

cdef class Schema:
    # The schema tables, shared with (and filled lazily by) fitcore/schema.py.
    cdef dict shapes        # type name -> (form, inner): form "list", "dict", "model", "skip"
    cdef dict leaves        # model -> frozenset of its fields that hold no objects
    cdef dict fields        # model -> {field: (type, form, leaf fields held or None)}
    cdef object shape_of    # type name -> (form, inner), filling `shapes` on a miss
    cdef object leaves_of   # model -> frozenset, filling `leaves` on a miss
    cdef object fields_of   # model -> its field table, filling `fields` on a miss
    cdef object render      # a path (str or (parent, how, step)) -> its text

    cdef tuple _shape(self, str typ)
    cpdef list unknown_fields(self, object obj, str model, object path=*)


cdef class DeviceReader:
    # The caches and helpers of fitcore/kube.py, shared: a miss is resolved by the same
    # Python helper the reference calls, so both see the same kept names and contents.
    cdef set names            # device names known to be valid
    cdef set attribute_names  # attribute names known to be valid
    cdef object name_ok       # name -> bool: checks, and keeps, a device name
    cdef object attribute_ok  # key -> bool: checks, and keeps, an attribute name
    cdef object rest_of       # device -> what the strict reader reads of its other fields
    cdef object parse_version # str -> values.Version (ValueError when not semver)
    cdef object device_type   # model.Device
    cdef tuple slots          # model.Device's fields, in order, when built slot by slot
    cdef tuple defaults       # per field (is a factory, the default or its factory);
                              # None for name and attributes (always given)
    cdef bint by_slots        # build devices slot by slot (else: call model.Device)

    cdef object _build(self, str name, dict attributes, dict rest)
    cdef object _one(self, object obj, object previous, object previous_rest, list found)
    cpdef list read(self, list devices)
