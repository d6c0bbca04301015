# The per-node work of a cold gang decision (fitcore/_project.pyx): no structs; internal
# routines over Python objects, each the compiled form of a reference method of
# fitcore/projection.py (named after it).

# Projection._observed: (observable attributes as (name, type, value), renamed names).
cdef tuple _observed(dict layouts, object proj, object a)
# projection._STATES.get(st) or projection._state(st).
cdef object _state_text(dict states, object state_of, object st)
# Whether a dict has exactly these keys, in this order.
cdef bint _same_names(object a, tuple names)
# Projection._unordered: (items, candidates, unbounded) of a pool without counters.
# With `names`: the device names are added to it, None when a device consumes counters.
cdef tuple _unordered(object proj, str driver, object devices, dict state, dict states,
                      object state_of, set names)
# Projection._pool: (ordered, shape, items, candidates, unbounded).
cdef tuple _pool(object proj, object view, tuple pk, list slices, object taken,
                 dict states, object state_of)
# Projection._ranks: renamed attribute values by rank of their group's content.
cdef dict _ranks(list pools)
# The node's slices pool by pool, in the order of its pools.
cdef list _by_pool(object local_slices, object local_pools)
# Projection._devices: (per-pool key parts, canonical order, candidates, unbounded), with
# each pool's allocation table in `taken`.
cdef tuple _devices(object proj, object local_slices, object local_pools, tuple taken,
                    dict states, object state_of)
# Projection._free: free resources as far as the gang's requests tell them apart.
cdef tuple _free(tuple free_view, dict node_free, object most)
# Projection._device_key's answer (key, label), not kept per device (the reference on a
# device whose capacity and counter maps are not interned yet).
cdef tuple _device_key(object proj, str driver, object d, tuple observed, tuple relabeled,
                       dict rests, dict intern, dict labels)
# Projection._label: the device's values of the renamed attribute, as text.
cdef object _label(object a, tuple relabeled, dict labels)
# Whether no device of a counter pool passes the selectors (Projection._ordered_pool).
cdef bint _none_selectable(object proj, str driver, object devices)
# A field of `o` from the slot at `offset` (> 0: its exact type checked), else getattr.
cdef object _slot(object o, Py_ssize_t offset, str name)
# Learn snapshot._NodeEntry's slots (the first `project_entries` call).
cdef _entry_type(object entry_type)
# A new projected entry with the base entry's fields (Projection.entry).
cdef object _projected_entry(object entry_type, object e, object key, object order)
# Set an empty slot of a new object.
cdef void _put(object o, Py_ssize_t offset, object value)
# An int, string, boolean, None or untracked tuple (nothing a cycle can go through).
cdef bint _atomic_value(object x)
# The tuple, untracked by the cyclic collector when it holds only atomic values and
# tuples of them.
cdef tuple _atomic(tuple t)
