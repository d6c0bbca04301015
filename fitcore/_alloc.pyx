# The compiled per-node search: depth-first over requests, alternatives and classes of
# interchangeable devices, with exact pruning. Return codes: 1 found, 0 none, -1 budget.
# (All requests under a claim constraint never get here: see fitcore/compiled.py.)

from cpython cimport array
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

from fitcore._alloc cimport Problem, State, i64

cdef array.array _I64 = array.array("q")

cdef enum:
    MAX_PER_CLAIM = 32  # resource.k8s.io/v1 AllocationResultsMaxSize


cdef inline i64 _n_con(const Problem* p) noexcept nogil:
    return p.con_claim_start[p.n_claims]


cdef bint _breaks(const Problem* p, State* s, i64 a, i64 d) noexcept nogil:
    """Whether device d, for alternative a, breaks one of its claim's constraints as they
    stand: it lacks the attribute, or (match) differs from the value the devices share, or
    (distinct) repeats a value."""
    cdef i64 c = p.alt_claim[a]
    cdef i64 j, v
    for j in range(p.con_claim_start[c], p.con_claim_start[c + 1]):
        if not p.con_cover[j * p.n_alt + a]:
            continue
        v = p.con_val[j * p.n_dev + d]
        if v < 0 or (p.con_match[j] and s.con_n[j] > 0 and s.con_cur[j] != v) or (
                not p.con_match[j] and s.val_n[j * p.n_values + v] > 0):
            return True
    return False


cdef bint _constraints_add(const Problem* p, State* s, i64 a, i64 d) noexcept nogil:
    """Add device d for alternative a to its claim's constraints, unless it breaks one."""
    cdef i64 c = p.alt_claim[a]
    cdef i64 j, v
    if _breaks(p, s, a, d):
        return False
    for j in range(p.con_claim_start[c], p.con_claim_start[c + 1]):
        if not p.con_cover[j * p.n_alt + a]:
            continue
        v = p.con_val[j * p.n_dev + d]
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
    if s.dev_used[d]:
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
    cdef i64 q, k, free_n, total = 0
    for q in range(pos, p.alt_cls_start[a + 1]):
        k = p.alt_cls[q]
        if p.cls_multi[k]:
            free_n = 0 if s.dev_used[p.cls_members[p.cls_start[k]]] else 1
            if free_n == 0:
                continue
        else:
            free_n = p.cls_start[k + 1] - p.cls_start[k] - s.cls_taken[k]
            if free_n <= 0:
                continue
        if not _breaks(p, s, a, p.cls_members[p.cls_start[k]]):
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
            d = s.members[p.cls_start[k] + s.cls_taken[k]]
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


cdef class Compiled:
    """A flattened problem bound once for repeated searches: holds the packed buffer (so
    its memory stays put) and the Problem struct pointing into it."""

    cdef const i64[::1] packed
    cdef const i64[::1] header
    cdef Problem p
    cdef i64 n_classes, n_counters, n_cap, n_pools, n_con

    def __cinit__(self, packed, header):
        self.packed = packed
        self.header = header
        cdef const i64* base = &self.packed[0] if self.packed.shape[0] else NULL
        cdef const i64* off = &self.header[9]
        self.p.n_claims = self.header[0]
        self.p.n_req = self.header[1]
        self.p.n_alt = self.header[2]
        self.p.n_dev = self.header[3]
        self.p.n_values = self.header[4]
        self.n_classes = self.header[5]
        self.n_counters = self.header[6]
        self.n_cap = self.header[7]
        self.n_pools = self.header[8]
        # Pointers in the order of compiled.Problem.FIELDS.
        self.p.claim_req_start = base + off[0]
        self.p.req_alt_start = base + off[1]
        self.p.alt_claim = base + off[2]
        self.p.alt_mode = base + off[3]
        self.p.alt_count = base + off[4]
        self.p.alt_cls_start = base + off[5]
        self.p.alt_cls = base + off[6]
        self.p.alt_dev_start = base + off[7]
        self.p.alt_dev = base + off[8]
        self.p.alt_dev_block = base + off[9]
        self.p.dev_cls = base + off[10]
        self.p.dev_pool = base + off[11]
        self.p.dev_multi = base + off[12]
        self.p.dev_ctr_start = base + off[13]
        self.p.ctr_id = base + off[14]
        self.p.ctr_amt = base + off[15]
        self.p.dev_cap_start = base + off[16]
        self.p.take_off = base + off[17]
        self.p.take_vals = base + off[18]
        self.p.cls_start = base + off[19]
        self.p.cls_members = base + off[20]
        self.p.cls_multi = base + off[21]
        self.p.con_claim_start = base + off[22]
        self.p.con_match = base + off[23]
        self.p.con_cover = base + off[24]
        self.p.con_val = base + off[25]
        self.n_con = _n_con(&self.p)

    @property
    def state_size(self):
        """Length of the state array `search` takes (compiled.Problem.STATE_FIELDS)."""
        return 2 * self.p.n_dev + self.n_counters + self.n_pools + self.n_cap


def search(Compiled problem not None, const i64[::1] state, i64 budget):
    """Run the search over a bound problem (`Compiled(packed, header)`) from an allocated
    state (`compiled.Problem.state`).

    Returns (status, steps, results): status 1 found, 0 no allocation exists, -1 budget
    exhausted; results lists the allocated (alternative a, device d) pairs in claim order,
    each as a * n_dev + d.
    """
    cdef Problem p = problem.p
    cdef State s
    cdef i64 n_con = problem.n_con, i, k, d, lo, hi, blocked
    cdef int status
    if state.shape[0] != problem.state_size:
        raise ValueError(f"state has {state.shape[0]} entries, the problem takes "
                         f"{problem.state_size}")
    cdef const i64* st = &state[0] if state.shape[0] else NULL
    p.dev_block = st
    p.shared_before = p.dev_block + p.n_dev
    p.ctr_avail = p.shared_before + p.n_dev
    p.pool_bad = p.ctr_avail + problem.n_counters
    p.cap_left = p.pool_bad + problem.n_pools

    # One zeroed block holds all of the search state.
    cdef i64 n_res = MAX_PER_CLAIM * p.n_claims
    cdef i64 total = (problem.n_classes + 3 * p.n_dev + problem.n_counters + problem.n_cap
                      + 2 * n_con + n_con * p.n_values + p.n_claims + 2 * n_res)
    cdef i64* block = <i64*> calloc(total + 1, sizeof(i64))
    if block == NULL:
        raise MemoryError()
    s.cls_taken = block
    s.members = s.cls_taken + problem.n_classes
    s.dev_used = s.members + p.n_dev
    s.dev_shares = s.dev_used + p.n_dev
    s.ctr_used = s.dev_shares + p.n_dev
    s.cap_used = s.ctr_used + problem.n_counters
    s.con_cur = s.cap_used + problem.n_cap
    s.con_n = s.con_cur + n_con
    s.val_n = s.con_n + n_con
    s.claim_n = s.val_n + n_con * p.n_values
    s.res_alt = s.claim_n + p.n_claims
    s.res_dev = s.res_alt + n_res
    s.res_len = 0
    s.steps = 0
    s.budget = budget
    try:
        with nogil:
            # Devices in use by other claims count as taken members of their class: they
            # go first in the pick order, so the search takes the free ones ascending.
            for k in range(problem.n_classes):
                lo = p.cls_start[k]
                hi = p.cls_start[k + 1]
                blocked = lo
                for i in range(lo, hi):
                    d = p.cls_members[i]
                    if p.dev_block[d]:
                        s.dev_used[d] = 1
                        s.members[blocked] = d
                        blocked += 1
                s.cls_taken[k] = blocked - lo
                for i in range(lo, hi):
                    d = p.cls_members[i]
                    if not p.dev_block[d]:
                        s.members[blocked] = d
                        blocked += 1
            status = search_request(&p, &s, 0)
        if status != 1:
            return status, s.steps, []
        return status, s.steps, [s.res_alt[i] * p.n_dev + s.res_dev[i]
                                 for i in range(s.res_len)]
    finally:
        free(block)


cdef inline bint _bit(const unsigned char* bits, i64 at) noexcept nogil:
    return (bits[at >> 3] >> (at & 7)) & 1


def device_classes(i64 n_alt, const i64[::1] base, const i64[::1] dev_multi,
                   const unsigned char[::1] member, i64 n_con, const i64[::1] con_val):
    """Classes of interchangeable devices and each alternative's class list, as
    compiled.Problem._classes and _lists compute them (the reference for this routine).

    `base[d]`: equal for devices of one pool with equal counter consumption; `member`:
    per alternative, `(n_dev + 7) // 8` bytes of candidacy bits (little-endian, bit d is
    device d); `con_val`: [n_con * n_dev] interned constrained values. A shared device is
    a class of its own; classes are numbered by their first device. Returns (dev_cls,
    cls_start, cls_members, cls_multi, alt_cls_start, alt_cls), int64 arrays.
    """
    cdef i64 n_dev = base.shape[0]
    cdef i64 nb = (n_dev + 7) >> 3
    if dev_multi.shape[0] != n_dev or con_val.shape[0] != n_con * n_dev or \
            member.shape[0] != n_alt * nb:
        raise ValueError("device_classes: inconsistent array sizes")
    cdef array.array dev_cls = array.clone(_I64, n_dev, zero=True)
    cdef array.array cls_start = array.clone(_I64, n_dev + 1, zero=True)
    cdef array.array cls_members = array.clone(_I64, n_dev, zero=True)
    cdef array.array cls_multi = array.clone(_I64, n_dev, zero=True)
    cdef array.array alt_cls_start = array.clone(_I64, n_alt + 1, zero=True)
    cdef array.array alt_cls = array.clone(_I64, n_alt * n_dev, zero=True)
    cdef i64* cls = <i64*> dev_cls.data.as_longlongs
    cdef i64* start = <i64*> cls_start.data.as_longlongs
    cdef i64* members = <i64*> cls_members.data.as_longlongs
    cdef i64* multi = <i64*> cls_multi.data.as_longlongs
    cdef i64* a_start = <i64*> alt_cls_start.data.as_longlongs
    cdef i64* a_cls = <i64*> alt_cls.data.as_longlongs
    cdef i64* rep = <i64*> calloc(n_dev + 1, sizeof(i64))
    cdef i64* fill = <i64*> calloc(n_dev + 1, sizeof(i64))
    cdef i64 d, j, r, a, c, k, n_cls = 0, n = 0
    cdef bint same
    cdef const unsigned char* bits = &member[0] if member.shape[0] else NULL
    if rep == NULL or fill == NULL:
        free(rep)
        free(fill)
        raise MemoryError()
    try:
        with nogil:
            for d in range(n_dev):
                k = -1
                if not dev_multi[d]:
                    for j in range(n_cls):
                        r = rep[j]
                        if multi[j] or base[r] != base[d]:
                            continue
                        same = True
                        for a in range(n_alt):
                            if _bit(bits, a * nb * 8 + r) != _bit(bits, a * nb * 8 + d):
                                same = False
                                break
                        if same:
                            for c in range(n_con):
                                if con_val[c * n_dev + r] != con_val[c * n_dev + d]:
                                    same = False
                                    break
                        if same:
                            k = j
                            break
                if k < 0:
                    k = n_cls
                    rep[k] = d
                    multi[k] = 1 if dev_multi[d] else 0
                    n_cls += 1
                cls[d] = k
                start[k + 1] += 1
            for k in range(n_cls):
                start[k + 1] += start[k]
                fill[k] = start[k]
            for d in range(n_dev):
                members[fill[cls[d]]] = d
                fill[cls[d]] += 1
            for a in range(n_alt):
                for k in range(n_cls):
                    if _bit(bits, a * nb * 8 + rep[k]):
                        a_cls[n] = k
                        n += 1
                a_start[a + 1] = n
    finally:
        free(rep)
        free(fill)
    array.resize(cls_start, n_cls + 1)
    array.resize(cls_multi, n_cls)
    array.resize(alt_cls, n)
    return dev_cls, cls_start, cls_members, cls_multi, alt_cls_start, alt_cls


def pack(fields, head):
    """compiled.Problem._pack in one pass: the int64 sequences `fields` in one buffer,
    and the header: the ints of `head`, then where each field starts. A field given as
    an int n stands for n zeros."""
    cdef Py_ssize_t total = 0, at = 0, i = 0, n
    for f in fields:
        n = f if type(f) is int else len(f)
        if n < 0:
            raise ValueError("pack: a negative number of zeros")
        total += n
    cdef array.array packed = array.clone(_I64, total, zero=False)
    cdef array.array header = array.clone(_I64, len(head) + len(fields), zero=False)
    cdef i64* out = <i64*> packed.data.as_longlongs
    cdef i64* h = <i64*> header.data.as_longlongs
    cdef const i64[::1] view
    for x in head:
        h[i] = x
        i += 1
    for f in fields:
        h[i] = at
        i += 1
        if type(f) is int:
            n = f
            memset(out + at, 0, n * sizeof(i64))
            at += n
        elif type(f) is array.array and (<array.array> f).ob_descr.typecode == c'q':
            n = len(f)
            if n:
                view = f
                memcpy(out + at, &view[0], n * sizeof(i64))
            at += n
        else:
            for x in f:
                out[at] = x
                at += 1
    return packed, header
