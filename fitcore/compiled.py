"""Facade over the compiled search (`fitcore._alloc`): flattens a prepared problem into
integer arrays and calls in.

What the arrays encode (see `_alloc.pxd` for the field-by-field layout):
- devices of the node's usable pools, in allocator order;
- per alternative (one way to satisfy a request), its candidate *classes*: devices that
  are identical for this problem (same pool, counters, candidacy for every alternative,
  value of every constrained attribute) are interchangeable, so the search picks a
  multiset of classes instead of a set of devices — exact symmetry breaking;
- counters as scaled integers (each counter's quantities share one exact scale);
- constrained attribute values interned to integers (type-tagged, so "1" != 1).

Inputs the compiled core does not take are answered by the reference engine: requests
with adminAccess; `All` requests under a claim constraint (upstream's answer then depends
on its search order, which the reference follows); quantities too large to scale exactly
into 62 bits.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence
from fractions import Fraction

from fitcore import cache, model, pools, reference, semantics, values

_LIMIT = 2**62


class Unsupported(Exception):
    """The compiled core cannot take this input; the reference engine answers instead."""


def _scale(amounts: Sequence[Fraction]) -> int:
    scale = 1
    for a in amounts:
        scale = math.lcm(scale, a.denominator)
    return scale


def _scaled(amount: Fraction, scale: int) -> int:
    v = amount * scale
    if abs(v) >= _LIMIT:
        raise Unsupported("quantity too large for exact 62-bit arithmetic")
    return int(v)


def _q(n: int = 0) -> array.array[int]:
    return array.array("q", [0] * n)


class Problem:
    """The flattened problem; attributes are the arrays `_alloc.search` reads."""

    def __init__(self, p: reference.Prepared) -> None:
        self.prepared = p
        allocated = p.inventory.allocated
        claims = p.claims
        # ---- devices (the node's devices and candidacy are cached across calls)
        node_devices = cache.for_slices(p.inventory.slices).devices_for(p.node)
        self.devices = node_devices.devices
        index = node_devices.index
        pool_ids = node_devices.pool_ids
        n_dev = len(self.devices)
        # ---- alternatives
        self.alts: list[tuple[int, reference.Alternative]] = []
        req_alt_start = [0]
        claim_req_start = [0]
        for ci, per_request in enumerate(p.alternatives):
            for alts in per_request:
                for alt in alts:
                    if alt.exact.admin_access:
                        raise Unsupported("adminAccess")
                    self.alts.append((ci, alt))
                req_alt_start.append(len(self.alts))
            claim_req_start.append(len(req_alt_start) - 1)
        n_alt = len(self.alts)
        # ---- candidacy, capacity takes
        member = [[False] * n_dev for _ in range(n_alt)]
        self.takes: dict[tuple[int, int], dict[str, values.Quantity]] = {}
        all_lists: list[list[int] | None] = []
        all_block: list[int] = []  # per device of an All list: in use or tainted
        for a, (_, alt) in enumerate(self.alts):
            if alt.all_devices is not None:
                ids = []
                for pool, device in alt.all_devices:
                    ident = model.DeviceId(pool.driver, pool.name, device.name)
                    d = index[ident]
                    take = semantics.capacity_take(alt.exact, device)
                    assert take is not None  # prepare() keeps only devices with capacity
                    all_block.append(1 if ident in allocated.dedicated
                                     or not semantics.taint_allows(device, alt.exact) else 0)
                    self.takes[(a, d)] = take
                    ids.append(d)
                    member[a][d] = True
                all_lists.append(ids)
                continue
            all_lists.append(None)
            for d, take in node_devices.candidates(alt.exact, alt.device_class, alt.label):
                _, device, ident = self.devices[d]
                if ident in allocated.dedicated:
                    continue
                used = allocated.consumed.get(ident)
                if used and not device.allow_multiple_allocations and \
                        not semantics.capacity_fits(device, take, used):
                    continue
                self.takes[(a, d)] = take
                member[a][d] = True
        # ---- constraints and interned attribute values
        con_claim_start = [0]
        con_match: list[int] = []
        con_cover: list[int] = []
        con_val: list[int] = []
        interned: dict[tuple[str, object], int] = {}
        for ci, claim in enumerate(claims):
            for constraint in claim.constraints:
                attribute = constraint.match_attribute or constraint.distinct_attribute or ""
                con_match.append(1 if constraint.match_attribute is not None else 0)
                for alt_ci, alt in self.alts:
                    con_cover.append(1 if alt_ci == ci and constraint.covers(
                        alt.request.name, alt.subrequest) else 0)
                for pool, device, _ in self.devices:
                    value = semantics.lookup_attribute(pool.driver, device, attribute)
                    if value is None:
                        con_val.append(-1)
                    else:
                        con_val.append(interned.setdefault(semantics.attribute_key(value),
                                                           len(interned)))
            con_claim_start.append(len(con_match))
        n_con = len(con_match)
        for j, cover in enumerate(con_cover):
            a = j % n_alt
            if cover and all_lists[a] is not None:
                # Upstream fails the whole allocation when a device of an All request
                # breaks a constraint, but only if its search order gets there first:
                # the reference follows that order, the class-based search cannot.
                raise Unsupported("allocationMode All under a claim constraint")
        # ---- counters
        counter_ids: dict[tuple[int, str, str], int] = {}
        avail_f: list[Fraction] = []
        ctr_pool: list[int] = []
        pool_bad = _q(len(pool_ids))
        for pool in p.pools:
            if not pool.usable or not pool.counter_sets:
                continue
            pi = pool_ids[(pool.driver, pool.name)]
            for set_name, counters in pools.available_counters(pool, allocated).items():
                for counter, amount in counters.items():
                    counter_ids[(pi, set_name, counter)] = len(avail_f)
                    avail_f.append(amount.value)
                    ctr_pool.append(pi)
                    if amount.value < 0:
                        pool_bad[pi] = 1
        per_counter: list[list[Fraction]] = [[v] for v in avail_f]
        uses: list[list[tuple[int, Fraction]]] = []
        for pool, device, _ in self.devices:
            pi = pool_ids[(pool.driver, pool.name)]
            mine = []
            for consumption in device.consumes_counters:
                for counter, amount in consumption.counters.items():
                    cid = counter_ids[(pi, consumption.counter_set, counter)]
                    mine.append((cid, amount.value))
                    per_counter[cid].append(amount.value)
            uses.append(mine)
        scales = [_scale(vs) for vs in per_counter]
        self.ctr_avail = array.array("q", [_scaled(v, scales[i]) for i, v in enumerate(avail_f)])
        dev_ctr_start = [0]
        ctr_id: list[int] = []
        ctr_amt: list[int] = []
        for mine in uses:
            for cid, fraction in mine:
                ctr_id.append(cid)
                ctr_amt.append(_scaled(fraction, scales[cid]))
            dev_ctr_start.append(len(ctr_id))
        # ---- multi-allocatable devices: capacity left, takes per alternative
        dev_cap_start = [0]
        cap_left: list[int] = []
        cap_scale: list[tuple[int, list[str]]] = []
        shared_before = _q(n_dev)
        take_off = array.array("q", [-1] * (n_alt * n_dev))
        take_vals: list[int] = []
        for d, (_, device, ident) in enumerate(self.devices):
            names = sorted(device.capacity) if device.allow_multiple_allocations else []
            used = allocated.consumed.get(ident) or {}
            if used:
                shared_before[d] = 1
            scale_by_name = {}
            for name in names:
                amounts = [device.capacity[name].value.value]
                amounts += [u.value for n, u in used.items() if n == name]
                amounts += [t[name].value for (a, dd), t in self.takes.items() if dd == d]
                scale_by_name[name] = _scale(amounts)
                left = device.capacity[name].value.value - (used[name].value if name in used
                                                             else 0)
                cap_left.append(_scaled(left, scale_by_name[name]))
            dev_cap_start.append(len(cap_left))
            cap_scale.append((d, names))
            if names:
                for a in range(n_alt):
                    take = self.takes.get((a, d))
                    if take is None:
                        continue
                    take_off[a * n_dev + d] = len(take_vals)
                    take_vals.extend(_scaled(take[n].value, scale_by_name[n]) for n in names)
        # ---- equivalence classes
        signature_of: dict[tuple[object, ...], int] = {}
        dev_cls = _q(n_dev)
        members: list[list[int]] = []
        cls_multi: list[int] = []
        for d, (pool, device, _) in enumerate(self.devices):
            if device.allow_multiple_allocations:
                k = len(members)
                members.append([d])
                cls_multi.append(1)
            else:
                sig = (pool_ids[(pool.driver, pool.name)], tuple(uses[d]),
                       tuple(member[a][d] for a in range(n_alt)),
                       tuple(con_val[j * n_dev + d] for j in range(n_con)))
                k = signature_of.get(sig, -1)
                if k < 0:
                    k = signature_of[sig] = len(members)
                    members.append([])
                    cls_multi.append(0)
                members[k].append(d)
            dev_cls[d] = k
        alt_cls_start = [0]
        alt_cls: list[int] = []
        alt_dev_start = [0]
        alt_dev: list[int] = []
        for a in range(n_alt):
            lst = all_lists[a]
            if lst is None:
                alt_cls.extend(k for k in range(len(members)) if member[a][members[k][0]])
            else:
                alt_dev.extend(lst)
            alt_cls_start.append(len(alt_cls))
            alt_dev_start.append(len(alt_dev))
        self.n_dev = n_dev
        self.n_values = max(len(interned), 1)
        self.claim_req_start = array.array("q", claim_req_start)
        self.req_alt_start = array.array("q", req_alt_start)
        self.alt_claim = array.array("q", [ci for ci, _ in self.alts])
        self.alt_mode = array.array("q", [1 if alt.all_devices is not None else 0
                                          for _, alt in self.alts])
        self.alt_count = array.array("q", [alt.needed if alt.all_devices is None
                                           else len(all_lists[a] or ())
                                           for a, (_, alt) in enumerate(self.alts)])
        self.alt_dev_block = array.array("q", all_block)
        self.alt_cls_start = array.array("q", alt_cls_start)
        self.alt_cls = array.array("q", alt_cls)
        self.alt_dev_start = array.array("q", alt_dev_start)
        self.alt_dev = array.array("q", alt_dev)
        self.dev_cls = dev_cls
        self.dev_pool = array.array("q", [pool_ids[(pl.driver, pl.name)]
                                          for pl, _, _ in self.devices])
        self.dev_multi = array.array("q", [1 if dv.allow_multiple_allocations else 0
                                           for _, dv, _ in self.devices])
        self.dev_ctr_start = array.array("q", dev_ctr_start)
        self.ctr_id = array.array("q", ctr_id)
        self.ctr_amt = array.array("q", ctr_amt)
        self.pool_bad = pool_bad
        self.dev_cap_start = array.array("q", dev_cap_start)
        self.cap_left = array.array("q", cap_left)
        self.shared_before = shared_before
        self.take_off = take_off
        self.take_vals = array.array("q", take_vals)
        cls_start = [0]
        flat: list[int] = []
        for m in members:
            flat.extend(m)
            cls_start.append(len(flat))
        self.cls_start = array.array("q", cls_start)
        self.cls_members = array.array("q", flat)
        self.cls_multi = array.array("q", cls_multi)
        self.con_claim_start = array.array("q", con_claim_start)
        self.con_match = array.array("q", con_match)
        self.con_cover = array.array("q", con_cover)
        self.con_val = array.array("q", con_val)
        self.n_classes = len(members)
        self.packed, self.header = self._pack()
        self.native: object | None = None  # the bound `_alloc.Compiled`, made by fitcore.api

    #: The arrays `_alloc.search` reads, in the order of `_alloc.pxd`'s Problem pointers.
    FIELDS = ("claim_req_start", "req_alt_start", "alt_claim", "alt_mode", "alt_count",
              "alt_cls_start", "alt_cls", "alt_dev_start", "alt_dev", "alt_dev_block",
              "dev_cls", "dev_pool", "dev_multi", "dev_ctr_start", "ctr_id", "ctr_amt",
              "ctr_avail", "pool_bad", "dev_cap_start", "cap_left", "shared_before",
              "take_off", "take_vals", "cls_start", "cls_members", "cls_multi",
              "con_claim_start", "con_match", "con_cover", "con_val")

    def _pack(self) -> tuple[array.array[int], array.array[int]]:
        """One contiguous buffer and a header of sizes and offsets, so that the compiled
        search takes a single buffer per call instead of thirty."""
        packed: array.array[int] = array.array("q")
        offsets = []
        for name in self.FIELDS:
            offsets.append(len(packed))
            packed.extend(getattr(self, name))
        header = array.array("q", [
            len(self.claim_req_start) - 1, len(self.req_alt_start) - 1, len(self.alt_claim),
            self.n_dev, self.n_values, self.n_classes, len(self.ctr_avail),
            len(self.cap_left), *offsets])
        return packed, header

    def results(self, res_alt: Sequence[int], res_dev: Sequence[int]
                ) -> tuple[tuple[model.DeviceResult, ...], ...]:
        per_claim: list[list[model.DeviceResult]] = [[] for _ in self.prepared.claims]
        for a, d in zip(res_alt, res_dev, strict=True):
            ci, alt = self.alts[a]
            _, device, ident = self.devices[d]
            multi = device.allow_multiple_allocations
            per_claim[ci].append(model.DeviceResult(
                alt.result_name, ident, shared=multi,
                consumed_capacity=self.takes[(a, d)] if multi else {}))
        return tuple(tuple(r) for r in per_claim)

