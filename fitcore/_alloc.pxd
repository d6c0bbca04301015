# Compiled per-node allocation search. Layout of the problem the facade
# (fitcore/compiled.py) flattens; all index arrays are int64.

from libc.stdint cimport int64_t

ctypedef int64_t i64

cdef struct Problem:
    # ---- shape
    i64 n_claims          # claims of the pod, searched in order
    i64 n_req             # requests over all claims, claim-major
    i64 n_alt             # alternatives over all requests (1, or firstAvailable entries)
    i64 n_dev             # devices of the node's usable pools, in allocator order
    i64 n_values          # interned constrained-attribute values
    # ---- requests and alternatives
    const i64* claim_req_start   # [n_claims+1] first request of each claim
    const i64* req_alt_start     # [n_req+1] first alternative of each request
    const i64* alt_claim         # [n_alt] claim of the alternative
    const i64* alt_mode          # [n_alt] 0 ExactCount, 1 All
    const i64* alt_count         # [n_alt] devices needed
    const i64* alt_cls_start     # [n_alt+1] ExactCount: candidate classes, ascending
    const i64* alt_cls
    const i64* alt_dev_start     # [n_alt+1] All: the devices to take, in order
    const i64* alt_dev
    const i64* alt_dev_block     #   the device is in use or tainted: the All fails
    # ---- devices and their classes of interchangeable devices
    const i64* dev_cls           # [n_dev] class of the device
    const i64* dev_pool          # [n_dev] pool of the device
    const i64* dev_multi         # [n_dev] allowMultipleAllocations
    const i64* dev_ctr_start     # [n_dev+1] counter consumption (CSR)
    const i64* ctr_id            #   counter index
    const i64* ctr_amt           #   amount, in the counter's scale
    const i64* dev_cap_start     # [n_dev+1] multi devices: capacity slots (CSR)
    const i64* take_off          # [n_alt*n_dev] offset of the take vector in take_vals or -1
    const i64* take_vals
    const i64* cls_start         # [n_classes+1] members of each class (CSR), ascending
    const i64* cls_members
    const i64* cls_multi         # [n_classes] singleton class of a multi device
    # ---- constraints (per claim)
    const i64* con_claim_start   # [n_claims+1] first constraint of each claim
    const i64* con_match         # [n_con] 1 matchAttribute, 0 distinctAttribute
    const i64* con_cover         # [n_con*n_alt] constraint applies to the alternative
    const i64* con_val           # [n_con*n_dev] interned value, -1 without the attribute
    # ---- the allocated state, per call (compiled.Problem.STATE_FIELDS)
    const i64* dev_block         # [n_dev] in use by other claims
    const i64* shared_before     # [n_dev] multi device already shared: counters paid
    const i64* ctr_avail         # [n_counters] available at start (may be negative)
    const i64* pool_bad          # [n_pools] some counter of the pool already negative
    const i64* cap_left          # [n_cap] multi devices: capacity left per slot

cdef struct State:
    i64* cls_taken      # [n_classes] members of the class taken (or blocked) so far
    i64* members        # [n_dev] class members in pick order: blocked first, then ascending
    i64* dev_used       # [n_dev] device blocked, or (non-multi) taken in this call
    i64* dev_shares     # [n_dev] shares of a multi device taken in this call
    i64* ctr_used       # [n_counters] consumed in this call
    i64* cap_used       # [len(cap_left)] multi capacity consumed in this call
    i64* con_cur        # [n_con] matchAttribute: the value the devices share
    i64* con_n          # [n_con] devices counted by the constraint
    i64* val_n          # [n_con*n_values] distinctAttribute: devices per value
    i64* claim_n        # [n_claims] devices allocated to the claim
    i64* res_alt        # [stack] alternative of each allocated device
    i64* res_dev        # [stack] the device
    i64 res_len
    i64 steps           # search steps taken
    i64 budget          # steps allowed

cdef int search_request(const Problem* p, State* s, i64 r) noexcept nogil
