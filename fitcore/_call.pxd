# The compiled core's per-call path over the claims (fitcore/_call.pyx): no structs, one
# internal routine.

# An ExactRequest's part of compiled.content_key: everything but the claim's names.
cdef tuple _exact_key(object e)
