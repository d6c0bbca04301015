# The compiled core's per-call path over the claims (fitcore/_call.pyx): no structs, one
# internal routine.

# An ExactRequest's part of compiled.content_key: everything but the claim's names.
cdef tuple _exact_key(object e)
# cache.NodeDevices.keep_problem, for a compiled problem or marker (never an exception).
cdef _keep(object node_devices, dict problems, tuple content, tuple value)
# content_key and walk, called in by kept without a Python call.
cdef tuple _content_key(object claims)
cdef object _walk(object node_arrays, object classes, object claims, object unsupported,
                  dict same)
