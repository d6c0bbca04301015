# The compiled per-node search: depth-first over requests, alternatives and classes of
# interchangeable devices, with exact pruning. Return codes: 1 found, 0 none, -1 budget.
# (All requests under a claim constraint never get here: see fitcore/compiled.py.)

from libc.stdlib cimport calloc, free

from fitcore._alloc cimport Problem, State, i64

cdef enum:
    MAX_PER_CLAIM = 32  # resource.k8s.io/v1 AllocationResultsMaxSize


cdef inline i64 _n_con(const Problem* p) noexcept nogil:
    return p.con_claim_start[p.n_claims]


cdef bint _constraints_add(const Problem* p, State* s, i64 a, i64 d) noexcept nogil:
    """Add device d for alternative a to its claim's constraints; undo on failure."""
    cdef i64 c = p.alt_claim[a]
    cdef i64 j, v, k
    for j in range(p.con_claim_start[c], p.con_claim_start[c + 1]):
        if not p.con_cover[j * p.n_alt + a]:
            continue
        v = p.con_val[j * p.n_dev + d]
        if v < 0 or (p.con_match[j] and s.con_n[j] > 0 and s.con_cur[j] != v) or (
                not p.con_match[j] and s.val_n[j * p.n_values + v] > 0):
            for k in range(p.con_claim_start[c], j):
                if p.con_cover[k * p.n_alt + a]:
                    _constraint_remove(p, s, k, d)
            return False
        s.con_cur[j] = v
        s.con_n[j] += 1
        if not p.con_match[j]:
            s.val_n[j * p.n_values + v] += 1
    return True


cdef inline void _constraint_remove(const Problem* p, State* s, i64 j, i64 d) noexcept nogil:
    s.con_n[j] -= 1
    if not p.con_match[j]:
        s.val_n[j * p.n_values + p.con_val[j * p.n_dev + d]] -= 1


cdef void _constraints_remove(const Problem* p, State* s, i64 a, i64 d) noexcept nogil:
    cdef i64 c = p.alt_claim[a]
    cdef i64 j
    for j in range(p.con_claim_start[c], p.con_claim_start[c + 1]):
        if p.con_cover[j * p.n_alt + a]:
            _constraint_remove(p, s, j, d)


cdef inline bint _pays_counters(const Problem* p, State* s, i64 d) noexcept nogil:
    if p.dev_ctr_start[d] == p.dev_ctr_start[d + 1]:
        return False
    return not (p.dev_multi[d] and (p.shared_before[d] or s.dev_shares[d] > 0))


cdef int _add(const Problem* p, State* s, i64 a, i64 d) noexcept nogil:
    """Allocate device d for alternative a: 1 done; 0 not possible (state unchanged);
    2 a claim constraint rejects it. Checks run in the allocator's order (in use,
    counters, constraints, capacity)."""
    cdef i64 i, c
    cdef i64 off = 0, n = 0, base = 0
    cdef bint pays
    if not p.dev_multi[d] and s.dev_used[d]:
        return 0
    pays = _pays_counters(p, s, d)
    if pays:
        if p.pool_bad[p.dev_pool[d]]:
            return 0
        for i in range(p.dev_ctr_start[d], p.dev_ctr_start[d + 1]):
            c = p.ctr_id[i]
            if s.ctr_used[c] + p.ctr_amt[i] > p.ctr_avail[c]:
                return 0
    if not _constraints_add(p, s, a, d):
        return 2
    if p.dev_multi[d]:
        off = p.take_off[a * p.n_dev + d]
        base = p.dev_cap_start[d]
        n = p.dev_cap_start[d + 1] - base
        for i in range(n):
            if off < 0 or s.cap_used[base + i] + p.take_vals[off + i] > p.cap_left[base + i]:
                _constraints_remove(p, s, a, d)
                return 0
    if pays:
        for i in range(p.dev_ctr_start[d], p.dev_ctr_start[d + 1]):
            s.ctr_used[p.ctr_id[i]] += p.ctr_amt[i]
    if p.dev_multi[d]:
        for i in range(n):
            s.cap_used[base + i] += p.take_vals[off + i]
        s.dev_shares[d] += 1
    else:
        s.dev_used[d] = 1
        s.cls_taken[p.dev_cls[d]] += 1
    s.claim_n[p.alt_claim[a]] += 1
    s.res_alt[s.res_len] = a
    s.res_dev[s.res_len] = d
    s.res_len += 1
    return 1


cdef void _remove(const Problem* p, State* s, i64 a, i64 d) noexcept nogil:
    cdef i64 i, off, base
    s.res_len -= 1
    s.claim_n[p.alt_claim[a]] -= 1
    if p.dev_multi[d]:
        s.dev_shares[d] -= 1
        off = p.take_off[a * p.n_dev + d]
        base = p.dev_cap_start[d]
        for i in range(p.dev_cap_start[d + 1] - base):
            s.cap_used[base + i] -= p.take_vals[off + i]
    else:
        s.dev_used[d] = 0
        s.cls_taken[p.dev_cls[d]] -= 1
    if _pays_counters(p, s, d):
        for i in range(p.dev_ctr_start[d], p.dev_ctr_start[d + 1]):
            s.ctr_used[p.ctr_id[i]] -= p.ctr_amt[i]
    _constraints_remove(p, s, a, d)


cdef bint _enough_left(const Problem* p, State* s, i64 a, i64 pos, i64 left) noexcept nogil:
    """Necessary condition: classes from `pos` on still hold `left` devices that are free
    and agree with the values the claim's constraints have fixed."""
    cdef i64 q, k, d, j, v, free_n, total = 0
    cdef i64 c = p.alt_claim[a]
    cdef bint ok
    for q in range(pos, p.alt_cls_start[a + 1]):
        k = p.alt_cls[q]
        if p.cls_multi[k]:
            free_n = 1
        else:
            free_n = p.cls_start[k + 1] - p.cls_start[k] - s.cls_taken[k]
            if free_n <= 0:
                continue
        d = p.cls_members[p.cls_start[k]]
        ok = True
        for j in range(p.con_claim_start[c], p.con_claim_start[c + 1]):
            if not p.con_cover[j * p.n_alt + a]:
                continue
            v = p.con_val[j * p.n_dev + d]
            if v < 0 or (p.con_match[j] and s.con_n[j] > 0 and s.con_cur[j] != v) or (
                    not p.con_match[j] and s.val_n[j * p.n_values + v] > 0):
                ok = False
                break
        if ok:
            total += free_n
            if total >= left:
                return True
    return False


cdef int _pick(const Problem* p, State* s, i64 r, i64 a, i64 left, i64 pos) noexcept nogil:
    """Choose `left` more devices for ExactCount alternative a from classes at >= pos."""
    cdef i64 q, k, d, nxt
    cdef int found
    if left == 0:
        return search_request(p, s, r + 1)
    s.steps += 1
    if s.steps > s.budget:
        return -1
    if not _enough_left(p, s, a, pos, left):
        return 0
    for q in range(pos, p.alt_cls_start[a + 1]):
        k = p.alt_cls[q]
        if p.cls_multi[k]:
            d = p.cls_members[p.cls_start[k]]
            nxt = q + 1          # a shared device serves one request at most once
        else:
            if s.cls_taken[k] >= p.cls_start[k + 1] - p.cls_start[k]:
                continue
            d = p.cls_members[p.cls_start[k] + s.cls_taken[k]]
            nxt = q              # the next member of the same class may follow
        if _add(p, s, a, d) != 1:
            continue
        found = _pick(p, s, r, a, left - 1, nxt)
        if found != 0:
            return found
        _remove(p, s, a, d)
    return 0


cdef int _take_all(const Problem* p, State* s, i64 r, i64 a, i64 i) noexcept nogil:
    cdef i64 d
    cdef int found
    if i == p.alt_dev_start[a + 1]:
        return search_request(p, s, r + 1)
    s.steps += 1
    if s.steps > s.budget:
        return -1
    d = p.alt_dev[i]
    if p.alt_dev_block[i]:
        return 0
    if _add(p, s, a, d) != 1:
        return 0
    found = _take_all(p, s, r, a, i + 1)
    if found == 0:
        _remove(p, s, a, d)
    return found


cdef int search_request(const Problem* p, State* s, i64 r) noexcept nogil:
    cdef i64 a
    cdef int found
    if r == p.n_req:
        return 1
    for a in range(p.req_alt_start[r], p.req_alt_start[r + 1]):
        if s.claim_n[p.alt_claim[a]] + p.alt_count[a] > MAX_PER_CLAIM:
            continue
        if p.alt_mode[a] == 1:
            if p.alt_count[a] == 0:
                continue
            found = _take_all(p, s, r, a, p.alt_dev_start[a])
        else:
            found = _pick(p, s, r, a, p.alt_count[a], p.alt_cls_start[a])
        if found != 0:
            return found
    return 0


cdef const i64* _ptr(const i64[::1] view):
    # An empty array has no first element; the search never reads it then.
    if view.shape[0] == 0:
        return NULL
    return &view[0]


def search(problem, i64 budget):
    """Run the search over a `fitcore.compiled.Problem`.

    Returns (status, steps, res_alt, res_dev): status 1 found, 0 no allocation exists,
    -1 budget exhausted; res_* list the allocated (alternative, device) pairs in order.
    """
    cdef Problem p
    cdef State s
    cdef const i64[::1] claim_req_start = problem.claim_req_start
    cdef const i64[::1] req_alt_start = problem.req_alt_start
    cdef const i64[::1] alt_claim = problem.alt_claim
    cdef const i64[::1] alt_mode = problem.alt_mode
    cdef const i64[::1] alt_count = problem.alt_count
    cdef const i64[::1] alt_dev_block = problem.alt_dev_block
    cdef const i64[::1] alt_cls_start = problem.alt_cls_start
    cdef const i64[::1] alt_cls = problem.alt_cls
    cdef const i64[::1] alt_dev_start = problem.alt_dev_start
    cdef const i64[::1] alt_dev = problem.alt_dev
    cdef const i64[::1] dev_cls = problem.dev_cls
    cdef const i64[::1] dev_pool = problem.dev_pool
    cdef const i64[::1] dev_multi = problem.dev_multi
    cdef const i64[::1] dev_ctr_start = problem.dev_ctr_start
    cdef const i64[::1] ctr_id = problem.ctr_id
    cdef const i64[::1] ctr_amt = problem.ctr_amt
    cdef const i64[::1] ctr_avail = problem.ctr_avail
    cdef const i64[::1] pool_bad = problem.pool_bad
    cdef const i64[::1] dev_cap_start = problem.dev_cap_start
    cdef const i64[::1] cap_left = problem.cap_left
    cdef const i64[::1] shared_before = problem.shared_before
    cdef const i64[::1] take_off = problem.take_off
    cdef const i64[::1] take_vals = problem.take_vals
    cdef const i64[::1] cls_start = problem.cls_start
    cdef const i64[::1] cls_members = problem.cls_members
    cdef const i64[::1] cls_multi = problem.cls_multi
    cdef const i64[::1] con_claim_start = problem.con_claim_start
    cdef const i64[::1] con_match = problem.con_match
    cdef const i64[::1] con_cover = problem.con_cover
    cdef const i64[::1] con_val = problem.con_val
    cdef i64 n_classes = problem.n_classes
    cdef i64 n_con, i
    cdef int status

    p.n_claims = claim_req_start.shape[0] - 1
    p.n_req = req_alt_start.shape[0] - 1
    p.n_alt = alt_claim.shape[0]
    p.n_dev = problem.n_dev
    p.n_values = problem.n_values
    p.claim_req_start = _ptr(claim_req_start)
    p.req_alt_start = _ptr(req_alt_start)
    p.alt_claim = _ptr(alt_claim)
    p.alt_mode = _ptr(alt_mode)
    p.alt_count = _ptr(alt_count)
    p.alt_dev_block = _ptr(alt_dev_block)
    p.alt_cls_start = _ptr(alt_cls_start)
    p.alt_cls = _ptr(alt_cls)
    p.alt_dev_start = _ptr(alt_dev_start)
    p.alt_dev = _ptr(alt_dev)
    p.dev_cls = _ptr(dev_cls)
    p.dev_pool = _ptr(dev_pool)
    p.dev_multi = _ptr(dev_multi)
    p.dev_ctr_start = _ptr(dev_ctr_start)
    p.ctr_id = _ptr(ctr_id)
    p.ctr_amt = _ptr(ctr_amt)
    p.ctr_avail = _ptr(ctr_avail)
    p.pool_bad = _ptr(pool_bad)
    p.dev_cap_start = _ptr(dev_cap_start)
    p.cap_left = _ptr(cap_left)
    p.shared_before = _ptr(shared_before)
    p.take_off = _ptr(take_off)
    p.take_vals = _ptr(take_vals)
    p.cls_start = _ptr(cls_start)
    p.cls_members = _ptr(cls_members)
    p.cls_multi = _ptr(cls_multi)
    p.con_claim_start = _ptr(con_claim_start)
    p.con_match = _ptr(con_match)
    p.con_cover = _ptr(con_cover)
    p.con_val = _ptr(con_val)
    n_con = _n_con(&p)

    # One zeroed block for all of the state; +1 keeps every size non-zero.
    s.cls_taken = <i64*> calloc(n_classes + 1, sizeof(i64))
    s.dev_used = <i64*> calloc(p.n_dev + 1, sizeof(i64))
    s.dev_shares = <i64*> calloc(p.n_dev + 1, sizeof(i64))
    s.ctr_used = <i64*> calloc(ctr_avail.shape[0] + 1, sizeof(i64))
    s.cap_used = <i64*> calloc(cap_left.shape[0] + 1, sizeof(i64))
    s.con_cur = <i64*> calloc(n_con + 1, sizeof(i64))
    s.con_n = <i64*> calloc(n_con + 1, sizeof(i64))
    s.val_n = <i64*> calloc(n_con * p.n_values + 1, sizeof(i64))
    s.claim_n = <i64*> calloc(p.n_claims + 1, sizeof(i64))
    s.res_alt = <i64*> calloc(MAX_PER_CLAIM * p.n_claims + 1, sizeof(i64))
    s.res_dev = <i64*> calloc(MAX_PER_CLAIM * p.n_claims + 1, sizeof(i64))
    s.res_len = 0
    s.steps = 0
    s.budget = budget
    try:
        if (s.cls_taken == NULL or s.dev_used == NULL or s.dev_shares == NULL
                or s.ctr_used == NULL or s.cap_used == NULL or s.con_cur == NULL
                or s.con_n == NULL or s.val_n == NULL or s.claim_n == NULL
                or s.res_alt == NULL or s.res_dev == NULL):
            raise MemoryError()
        with nogil:
            status = search_request(&p, &s, 0)
        res_alt = [s.res_alt[i] for i in range(s.res_len)] if status == 1 else []
        res_dev = [s.res_dev[i] for i in range(s.res_len)] if status == 1 else []
        return status, s.steps, res_alt, res_dev
    finally:
        free(s.cls_taken)
        free(s.dev_used)
        free(s.dev_shares)
        free(s.ctr_used)
        free(s.cap_used)
        free(s.con_cur)
        free(s.con_n)
        free(s.val_n)
        free(s.claim_n)
        free(s.res_alt)
        free(s.res_dev)
