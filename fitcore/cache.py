"""Work that depends only on the ResourceSlices, kept across calls.

A service (or a gang placement) asks many questions of one inventory whose slices do not
change between questions while its allocated state does (pod by pod). Pools per node and
selector results per device depend on the slices alone, so they are cached under the
identity of the inventory's slices tuple. The entry holds that tuple, so its id cannot be
reused while cached; entries are kept least recently used first out. Per node the
entry also keeps the compiled core's problems by claim content (`NodeDevices.problems`):
they too depend on the slices, the node and the claims, not on the allocated state.

All of it lives in a `Store`. The process has a default one (a few entries: one-off
questions on whole inventories); `fitcore.inventory.Inventory` owns its own, sized to its
nodes, and makes it current (`use`) while it decides. A gang decision asks about each node
class representative with that node's own slices tuple, which the inventory keeps stable
while the node's slices do not change, so the entry of an unchanged node survives any
change elsewhere. Selector results are kept per store by (expression, what the expression
can read of the device), so devices that differ only in attributes no selector reads (a
`uuid`) share one evaluation.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator

from fitcore import model, pools, semantics, values

_SIZE = 8
_QUESTIONS = 256
_CHOICES = 256  # candidate lists per node, by request content

#: Compiled problems kept over all nodes (fitcore.compiled), oldest out first. One takes
#: about 7-30 KiB, so the default bounds them near 120-480 MiB; it covers four claim
#: templates on each of 4,096 nodes. Sweeps over more (node, template) pairs than this
#: compile every question anew. FITCORE_KEPT_PROBLEMS changes it.
KEPT_PROBLEMS = int(os.environ.get("FITCORE_KEPT_PROBLEMS", "16384"))


_Pool = pools.Pool


def without_frames(value: object) -> object:
    """`value` fit to be kept: an exception (an allocation question answered by a
    `ClaimError`) loses its traceback, and so do the exceptions it was raised from. A
    traceback holds the frames it passed, and each frame its caller's, up to the gang
    search that asked, with every class and fill of that decision: kept with the answer,
    they were hundreds of MiB at 10,000 nodes that no decision used again."""
    seen = 0
    error = value
    while isinstance(error, BaseException) and seen < 16:
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
        seen += 1
    return value


@dataclasses.dataclass(slots=True)
class Entry:
    slices: tuple[model.ResourceSlice, ...]
    store: Store
    selector: semantics.Selector = dataclasses.field(default_factory=semantics.Selector)
    pools: dict[tuple[str, tuple[tuple[str, str], ...]], list[_Pool]] = dataclasses.field(
        default_factory=dict)

    devices: dict[tuple[str, tuple[tuple[str, str], ...]], NodeDevices] = dataclasses.field(
        default_factory=dict)
    # The same, by node object identity (the node is kept, so that its id stays unique).
    by_node: dict[int, tuple[model.Node, NodeDevices]] = dataclasses.field(default_factory=dict)

    # Questions compiled with their allocated state built in (the few a kept problem
    # cannot take, see fitcore.compiled): (node, allocated state, classes, claims) by
    # identity -> the objects (kept, so that ids stay unique) and what compiling gave.
    compiled: collections.OrderedDict[tuple[object, ...], tuple[tuple[object, ...], object]] = (
        dataclasses.field(default_factory=collections.OrderedDict))

    def remember(self, key: tuple[object, ...], refs: tuple[object, ...], value: object) -> None:
        self.compiled[key] = (refs, without_frames(value))
        while len(self.compiled) > _QUESTIONS:
            self.compiled.popitem(last=False)

    def recall(self, key: tuple[object, ...]) -> object | None:
        found = self.compiled.get(key)
        if found is None:
            return None
        self.compiled.move_to_end(key)
        return found[1]

    def pools_for(self, node: model.Node) -> list[_Pool]:
        key = _node_key(node)
        found = self.pools.get(key)
        if found is None:
            found = self.pools[key] = pools.gather(node, self.slices)
        return found

    def devices_for(self, node: model.Node) -> NodeDevices:
        hit = self.by_node.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        key = _node_key(node)
        found = self.devices.get(key)
        if found is None:
            found = self.devices[key] = NodeDevices(node, self.pools_for(node), self.selector,
                                                    self.store)
        if len(self.by_node) > 2 * len(self.devices) + 64:
            self.by_node.clear()  # node objects come and go (a service re-reads them)
        self.by_node[id(node)] = (node, found)
        return found


def _node_key(node: model.Node) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (node.name, tuple(sorted(node.labels.items())))


class NodeDevices:
    """The devices a node may allocate from (usable pools, per-device node selection), in
    allocator order, and which of them each request alternative could ever take."""

    def __init__(self, node: model.Node, gathered: list[pools.Pool],
                 selector: semantics.Selector, store: Store | None = None) -> None:
        self.selector = selector
        self.store = store if store is not None else current()
        self.devices: list[tuple[pools.Pool, model.Device, model.DeviceId]] = []
        self.slices: list[model.ResourceSlice] = []
        self.index: dict[model.DeviceId, int] = {}
        self.pool_ids: dict[tuple[str, str], int] = {}
        for pool in gathered:
            if not pool.usable:
                continue
            self.pool_ids[(pool.driver, pool.name)] = len(self.pool_ids)
            for s, device in pool.devices:
                if not pools.device_on_node(node, s, device):
                    continue
                ident = model.DeviceId(pool.driver, pool.name, device.name)
                self.index[ident] = len(self.devices)
                self.devices.append((pool, device, ident))
                self.slices.append(s)
        self.usable_pools = [pool for pool in gathered if pool.usable]
        self._choices: dict[tuple[object, ...], _Choice] = {}
        # The compiled core's per-node arrays and its problems by claim content
        # (fitcore.compiled owns what is stored here).
        self.arrays: object | None = None
        # key -> (what keeps the key's ids valid, outcome); a plain dict, read directly.
        self.problems: dict[object, tuple[object, object]] = {}

    def keep_problem(self, key: object, value: tuple[object, object]) -> None:
        """Keep a compiled problem; over the store's bound on all nodes, the oldest goes."""
        value = (value[0], without_frames(value[1]))
        self.problems[key] = value
        kept = self.store.kept
        kept.append((self, key, value))
        while len(kept) > self.store.kept_problems:
            node_devices, old, problem = kept.popleft()
            if node_devices.problems.get(old) is problem:  # not since compiled again
                del node_devices.problems[old]

    def candidates(self, exact: model.ExactRequest, device_class: model.DeviceClass,
                   label: str) -> list[Candidate]:
        """Devices that match the class and selectors, tolerate taints and can serve the
        capacity request — whatever is allocated. Devices whose selectors fail at runtime
        are left out: prepare() has already reported any such device the search could
        reach."""
        return self._choice(exact, device_class, label).candidates

    def failing(self, exact: model.ExactRequest, device_class: model.DeviceClass,
                label: str) -> list[int]:
        """Devices on which the class's or the request's selectors fail at runtime."""
        return self._choice(exact, device_class, label).failing

    def _choice(self, exact: model.ExactRequest, device_class: model.DeviceClass,
                label: str) -> _Choice:
        # By value: every pod's claim has its own ExactRequest object, asking the same.
        capacity = tuple(sorted((exact.capacity_requests or {}).items()))
        key = (exact.device_class, exact.selectors, exact.tolerations, capacity,
               id(device_class))
        found = self._choices.get(key)
        if found is not None and found.device_class is device_class:
            return found
        choice = _Choice(device_class, [], [])
        for d, (pool, device, _) in enumerate(self.devices):
            try:
                if not semantics.device_selectable(self.selector, device_class, exact, label,
                                                   pool.driver, device):
                    continue
            except semantics.SelectionError:
                choice.failing.append(d)
                continue
            if not semantics.taint_allows(device, exact):
                continue
            take = semantics.capacity_take(exact, device)
            if take is None:
                continue
            if not device.allow_multiple_allocations and not semantics.capacity_fits(
                    device, take):
                continue  # a dedicated device must hold the whole request
            choice.candidates.append((d, take))
        self._choices[key] = choice
        if len(self._choices) > _CHOICES:
            del self._choices[next(iter(self._choices))]  # the oldest
        return choice


Candidate = tuple[int, dict[str, values.Quantity]]


@dataclasses.dataclass(slots=True)
class _Choice:
    device_class: model.DeviceClass  # kept: the key holds its id
    candidates: list[Candidate]
    failing: list[int]


class Store:
    """Kept work: entries per slices tuple (least recently used out past `size`) and the
    compiled problems over all of them (oldest out past `kept_problems`)."""

    def __init__(self, *, size: int = _SIZE, kept_problems: int | None = None) -> None:
        self.size = size
        self.kept_problems = KEPT_PROBLEMS if kept_problems is None else kept_problems
        self.entries: collections.OrderedDict[int, Entry] = collections.OrderedDict()
        self.kept: collections.deque[tuple[NodeDevices, object, object]] = collections.deque()
        # Shared by every entry: results by (expression, device content).
        self.selector = semantics.Selector(by_content=True)

    def for_slices(self, slices: tuple[model.ResourceSlice, ...]) -> Entry:
        key = id(slices)
        entry = self.entries.get(key)
        if entry is not None and entry.slices is slices:
            self.entries.move_to_end(key)
            return entry
        entry = self.entries[key] = Entry(slices, self, self.selector)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return entry

    def stats(self) -> dict[str, int]:
        return {"kept entries": len(self.entries), "kept problems": len(self.kept),
                "selector results": self.selector.size()}


_default = Store()
_current: contextvars.ContextVar[Store] = contextvars.ContextVar("fitcore_store",
                                                                 default=_default)


def current() -> Store:
    """The store questions are answered with now."""
    return _current.get()


@contextlib.contextmanager
def use(store: Store) -> Iterator[Store]:
    """Answer questions with `store` inside the block (per thread and task)."""
    token = _current.set(store)
    try:
        yield store
    finally:
        _current.reset(token)


def for_slices(slices: tuple[model.ResourceSlice, ...]) -> Entry:
    return _current.get().for_slices(slices)
