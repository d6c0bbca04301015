"""Build the model from plain Kubernetes JSON (dicts as the API server or YAML gives them).

No client library here, so the same code reads files and live objects. Every parser
validates what allocation depends on, collects *all* problems with their field paths and
raises one `errors.InputError`; nothing half-parsed is ever returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, cast

from fitcore import errors, fields, model, schema, values

_TAINT_EFFECTS = {"None", "NoSchedule", "NoExecute"}


def collector(obj: Any, kind: str, source: str | None = None) -> errors.Collector:
    """The collector of one object's problems, naming it (`describe`) at the first."""
    return errors.Collector(lambda: describe(obj, kind), source)


def describe(obj: Any, default_kind: str) -> str:
    """`Kind namespace/name` for messages, tolerant of malformed objects."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        return f"{default_kind} <not an object>"
    kind = obj.get("kind") or default_kind
    meta = obj.get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        meta = {}
    name = meta.get("name") or "<unnamed>"
    namespace = meta.get("namespace")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


class Parsed:
    """Nodes and ResourceSlices parsed once for every `inventory.Inventory` given this
    object: the service's live engine and the gate's idle engine are fed the same store
    objects, and each would parse them (and keep its own copy of every device) otherwise.

    Kept per (kind, name): the object as given to `Inventory.apply`, whether it was read
    leniently, the parsed model object (immutable) and the notes of the read. Another
    inventory applying an object equal to the kept one (the same store object, or a
    shallow copy of it: compared by identity first, then by value) takes the parsed one;
    anything else is parsed afresh and replaces the entry. A DELETED event drops it, so
    it holds at most one entry per object of the cluster. Safe to share between threads
    (each call is one dict operation); the counters are for benchmarks and tests.
    """

    KINDS = ("Node", "ResourceSlice")

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[Mapping[str, Any], bool, Any,
                                                tuple[str, ...]]] = {}
        self.hits = 0  # objects taken parsed
        self.parses = 0  # objects parsed and kept

    def get(self, kind: str, obj: Mapping[str, Any], lenient: bool
            ) -> tuple[model.Node | model.ResourceSlice, tuple[str, ...]] | None:
        """The parsed object and its notes if `obj` equals the one kept for its name."""
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        hit = self._kept.get((kind, name)) if isinstance(name, str) and name else None
        if hit is None or hit[1] != lenient or (hit[0] is not obj and hit[0] != obj):
            return None
        self.hits += 1
        return hit[2], hit[3]

    def keep(self, kind: str, name: str, source: Mapping[str, Any] | None, lenient: bool,
             parsed: model.Node | model.ResourceSlice | None, notes: list[str]) -> None:
        """Keep what `source` parsed to (None for either: forget the name)."""
        if source is None or parsed is None:
            self._kept.pop((kind, name), None)
            return
        self.parses += 1
        self._kept[(kind, name)] = (source, lenient, parsed, tuple(notes))

    def __len__(self) -> int:
        return len(self._kept)


# ----------------------------------------------------------------- node selection


def _node_selection(r: fields.Reader, spec: Mapping[str, Any], path: str, *, allow_per_device: bool,
                    counters_only: bool) -> dict[str, Any]:
    node_name = r.get(spec, "nodeName", path, str)
    all_nodes = r.get(spec, "allNodes", path, bool, default=False)
    selector_obj = r.get(spec, "nodeSelector", path, Mapping)
    per_device = r.get(spec, "perDeviceNodeSelection", path, bool, default=False) \
        if allow_per_device else False
    chosen = [n for n, v in (("nodeName", node_name), ("nodeSelector", selector_obj),
                             ("allNodes", all_nodes), ("perDeviceNodeSelection", per_device)) if v]
    if len(chosen) > 1:
        r.c.add(path, f"exactly one of nodeName, nodeSelector, allNodes"
                      f"{', perDeviceNodeSelection' if allow_per_device else ''} may be set, "
                      f"found {', '.join(chosen)}")
    elif not chosen and not counters_only and allow_per_device:
        r.c.add(path, "one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required")
    selector = None
    if selector_obj is not None:
        selector = fields.node_selector(r, selector_obj, f"{path}.nodeSelector")
        if allow_per_device and len(selector.terms) != 1:
            r.c.add(f"{path}.nodeSelector.nodeSelectorTerms", "must have exactly one term")
    return {"node_name": node_name or None, "all_nodes": bool(all_nodes),
            "node_selector": selector, **({"per_device_node_selection": bool(per_device)}
                                          if allow_per_device else {})}


# --------------------------------------------------------------------- ResourceSlice


def resource_slice(obj: Mapping[str, Any], source: str | None = None) -> model.ResourceSlice:
    """A resource.k8s.io/v1 ResourceSlice."""
    c = collector(obj, "ResourceSlice", source)
    r = fields.Reader(c)
    name, _ = fields.meta_name(r, obj)
    spec = r.get(obj, "spec", "", Mapping, required=True, default={})
    driver = r.name(spec.get("driver"), "spec.driver", fields.DNS_SUBDOMAIN,
                    "driver name (DNS subdomain)", 63)
    pool = r.get(spec, "pool", "spec", Mapping, required=True, default={})
    pool_name = r.get(pool, "name", "spec.pool", str, required=True, default="")
    if pool_name and len(pool_name) > 253:
        c.add("spec.pool.name", "must be at most 253 characters")
    generation = r.get(pool, "generation", "spec.pool", int, default=0)
    count = r.get(pool, "resourceSliceCount", "spec.pool", int, required=True, default=1)
    if count is not None and count < 1:
        c.add("spec.pool.resourceSliceCount", f"must be at least 1, got {count}")
    counter_sets = []
    counter_sets_raw = r.items(spec, "sharedCounters", "spec", limit=8)
    for cpath, cs in counter_sets_raw:
        cs_name = r.name(cs.get("name"), f"{cpath}.name", fields.DNS_LABEL,
                         "counter set name (DNS label)", 63)
        counters = r.quantities(cs, "counters", cpath, negative=True, wrapped=True,
                                required=True)
        counter_sets.append(model.CounterSet(cs_name, counters))
    devices_raw = r.items(spec, "devices", "spec")
    if counter_sets and devices_raw:
        c.add("spec", "a slice holds either devices or sharedCounters, not both")
    if len(devices_raw) > 64:  # the limit is 64 devices with counters or taints, else 128
        limit = 64 if any(d.get("consumesCounters") or d.get("taints")
                          for _, d in devices_raw) else 128
        if len(devices_raw) > limit:
            c.add("spec.devices", f"must have at most {limit} devices, has {len(devices_raw)}")
    selection = _node_selection(r, spec, "spec", allow_per_device=True,
                                counters_only=bool(counter_sets))
    per_device = selection["per_device_node_selection"]
    fast = [None] * len(devices_raw) if per_device else _common_devices(
        [d for _, d in devices_raw])
    devices = tuple(cast(list[model.Device], fast)) if all(fast) else tuple(  # all read fast
        f or _device(r, d, p, per_device) for f, (p, d) in zip(fast, devices_raw, strict=True))
    _unique_names(c, devices_raw, "device")
    _unique_names(c, counter_sets_raw, "counter set")
    c.raise_if_any()
    return model.ResourceSlice(name=name, driver=driver, pool=pool_name, generation=generation,
                               resource_slice_count=count, devices=devices,
                               shared_counters=tuple(counter_sets), **selection)


def _unique_names(c: errors.Collector, items: list[tuple[str, Any]], what: str) -> None:
    """Names are unique within a slice's list, as the API server requires."""
    try:  # (items are objects: `Reader.items` keeps only those)
        if len({item.get("name") for _, item in items}) == len(items):
            return
    except TypeError:  # a name that is not a string (reported where it is read)
        pass
    seen: set[str] = set()
    for path, item in items:
        item_name = item.get("name") if isinstance(item, Mapping) else None
        if isinstance(item_name, str):
            if item_name in seen:
                c.add(f"{path}.name", f"duplicate {what} name {item_name!r}")
            seen.add(item_name)


# Reading a device, fast: devices of one model differ in their name and attribute values
# (uuid, bus id) and little else. `_common_device` reads a device of the common form (no
# per-device node selection) when it is valid, with names checked once each and the rest
# of the device (capacity, counters, taints, ...) read once per distinct content and
# shared by the devices that have it; anything else it leaves to `_device`, the strict
# reader, which gives the messages. Bounded: the caches start afresh at `_KEPT` entries.
# `_common_devices` reads a slice's devices so, compiled (`fitcore/_read.pyx`, with these
# caches and helpers) unless FITCORE_NO_EXTENSIONS=1; `_common_device` is its reference.
_KEPT = 1 << 14
_DEVICE_NAMES: set[str] = set()  # valid device names
_ATTRIBUTE_NAMES: set[str] = set()  # valid attribute names
_REST: dict[str, dict[str, Any]] = {}  # a device's other fields -> what `_device` reads
_REFUSED: dict[str, Any] = {}  # a rest that the strict reader refuses


def _common_devices(raw: list[Any]) -> list[model.Device | None]:
    """`_common_device` of each device of a slice."""
    if _COMPILED is not None:
        found: list[model.Device | None] = _COMPILED.read(raw)
        return found
    return [_common_device(d) for d in raw]


def _common_device(obj: Mapping[str, Any]) -> model.Device | None:
    """The device when it is valid and of the common form, else None (read it strictly)."""
    if type(obj) is not dict:
        return None
    name = obj.get("name")
    if type(name) is not str:
        return None
    if name not in _DEVICE_NAMES and not _device_name(name):
        return None
    attributes: dict[str, model.AttributeValue] = {}
    raw_attributes = obj.get("attributes")
    if raw_attributes is not None:
        if type(raw_attributes) is not dict:
            return None
        for key, raw in raw_attributes.items():
            if type(key) is not str or (key not in _ATTRIBUTE_NAMES and
                                        not _attribute_name(key)):
                return None
            if type(raw) is not dict or len(raw) != 1:
                return None
            for kind, value in raw.items():
                kind_of = type(value)
                if kind == "string":
                    if kind_of is not str or len(value) > 64:
                        return None
                elif kind == "int":
                    if kind_of is not int or not -(2**63) <= value < 2**63:
                        return None
                elif kind == "bool":
                    if kind_of is not bool:
                        return None
                elif kind == "version" and kind_of is str and len(value) <= 64:
                    try:
                        value = values.Version.parse(value)
                    except ValueError:
                        return None
                else:
                    return None
                attributes[key] = value
    rest = _rest(obj)
    if rest is None:
        return None
    if len(attributes) + len(rest["capacity"]) > 32:
        return None
    return model.Device(name=name, attributes=attributes, **rest)


def _device_name(name: str) -> bool:
    """Whether `name` is a valid device name (kept when it is)."""
    if not (0 < len(name) <= 63 and fields.DNS_LABEL.match(name)):
        return False
    if len(_DEVICE_NAMES) >= _KEPT:
        _DEVICE_NAMES.clear()
    _DEVICE_NAMES.add(name)
    return True


def _attribute_name(key: Any) -> bool:
    c = errors.Collector("")
    fields.Reader(c).qualified_name(key, "", require_domain=False)
    if c.errors:
        return False
    if len(_ATTRIBUTE_NAMES) >= _KEPT:
        _ATTRIBUTE_NAMES.clear()
    _ATTRIBUTE_NAMES.add(key)
    return True


def _rest(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What the strict reader reads from the device's fields other than its name and
    attributes, found once per distinct content; None when it refuses them."""
    # JSON's repr tells types apart (True from 1, "1" from 1) and is made in C.
    content = repr([(k, v) for k, v in obj.items() if k != "name" and k != "attributes"])
    found = _REST.get(content)
    if found is None:
        c = errors.Collector("")
        d = _device(fields.Reader(c), {k: v for k, v in obj.items() if k != "attributes"},
                    "", False)
        found = _REFUSED if c.errors else {
            "capacity": d.capacity, "consumes_counters": d.consumes_counters,
            "taints": d.taints, "allow_multiple_allocations": d.allow_multiple_allocations,
            "binding_conditions": d.binding_conditions, "binds_to_node": d.binds_to_node}
        if len(_REST) >= _KEPT:
            _REST.clear()
        _REST[content] = found
    return None if found is _REFUSED else found


_COMPILED: Any = None if schema.compiled is None else schema.compiled.DeviceReader(
    _DEVICE_NAMES, _ATTRIBUTE_NAMES, _device_name, _attribute_name, _rest,
    values.Version.parse, model.Device)


def _attribute(r: fields.Reader, raw: Any, path: str) -> model.AttributeValue | None:
    if not isinstance(raw, Mapping):
        r.c.add(path, "must be an object with one of int, bool, string, version")
        return None
    kinds = [k for k in ("int", "bool", "string", "version") if raw.get(k) is not None]
    unknown = [k for k in raw if k not in ("int", "bool", "string", "version")]
    if unknown:
        r.c.add(path, f"unsupported attribute type {unknown[0]!r} (list types are alpha, off by "
                      "default in Kubernetes 1.36 and 1.37, whose API servers then refuse them)")
        return None
    if len(kinds) != 1:
        r.c.add(path, "exactly one of int, bool, string, version must be set")
        return None
    kind = kinds[0]
    value = raw[kind]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            r.c.add(f"{path}.int", f"must be an integer, got {value!r}")
            return None
        if not -(2**63) <= value < 2**63:
            r.c.add(f"{path}.int", f"{value} does not fit in a 64-bit integer")
            return None
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            r.c.add(f"{path}.bool", f"must be a boolean, got {value!r}")
            return None
        return value
    if not isinstance(value, str):
        r.c.add(f"{path}.{kind}", f"must be a string, got {value!r}")
        return None
    if len(value) > 64:
        r.c.add(f"{path}.{kind}", "must be at most 64 characters")
    if kind == "version":
        try:
            return values.Version.parse(value)
        except ValueError as exc:
            r.c.add(f"{path}.version", f"{value!r} is not a semantic version: {exc}")
            return None
    return value


def _device(r: fields.Reader, obj: Mapping[str, Any], path: str, per_device: bool) -> model.Device:
    name = r.name(obj.get("name"), f"{path}.name", fields.DNS_LABEL, "device name (DNS label)", 63)
    attributes: dict[str, model.AttributeValue] = {}
    for key, raw in r.get(obj, "attributes", path, Mapping, default={}).items():
        apath = f"{path}.attributes[{key!r}]"
        r.qualified_name(key, apath, require_domain=False)
        value = _attribute(r, raw, apath)
        if value is not None:
            attributes[key] = value
    capacity: dict[str, model.DeviceCapacity] = {}
    for key, raw in r.get(obj, "capacity", path, Mapping, default={}).items():
        cpath = f"{path}.capacity[{key!r}]"
        r.qualified_name(key, cpath, require_domain=False)
        if not isinstance(raw, Mapping):
            r.c.add(cpath, "must be an object with a value")
            continue
        q = r.quantity(raw.get("value"), f"{cpath}.value")
        policy = _request_policy(r, raw.get("requestPolicy"), f"{cpath}.requestPolicy")
        if q is not None:
            capacity[key] = model.DeviceCapacity(q, policy)
    if len(attributes) + len(capacity) > 32:
        r.c.add(path, "attributes and capacity together must have at most 32 entries")
    consumes = []
    for cpath, cc in r.items(obj, "consumesCounters", path, limit=2):
        counters = r.quantities(cc, "counters", cpath, negative=True, wrapped=True,
                                required=True)
        groups = r.get(cc, "compatibilityGroups", cpath, list, default=[])
        if len(groups) > 2:
            r.c.add(f"{cpath}.compatibilityGroups",
                    f"must have at most 2 entries, has {len(groups)}")
        for i, group in enumerate(groups):
            r.name(group, f"{cpath}.compatibilityGroups[{i}]", fields.DNS_LABEL,
                   "compatibility group name (DNS label)", 63)
        if len(set(map(str, groups))) != len(groups):
            r.c.add(f"{cpath}.compatibilityGroups", "must not repeat a group")
        consumes.append(model.CounterConsumption(
            r.get(cc, "counterSet", cpath, str, required=True, default=""), counters,
            tuple(str(g) for g in groups)))
    taints = []
    for tpath, t in r.items(obj, "taints", path, limit=16):
        effect = r.get(t, "effect", tpath, str, required=True, default="NoSchedule")
        if effect not in _TAINT_EFFECTS:
            r.c.add(f"{tpath}.effect", f"unknown effect {effect!r}; one of None, NoSchedule, "
                                       "NoExecute")
        taints.append(model.DeviceTaint(r.get(t, "key", tpath, str, required=True, default=""),
                                        r.get(t, "value", tpath, str, default=""), effect))
    selection: dict[str, Any] = {"node_name": None, "all_nodes": False, "node_selector": None}
    if per_device:
        selection = _node_selection(r, obj, path, allow_per_device=False, counters_only=False)
        if not (selection["node_name"] or selection["all_nodes"] or selection["node_selector"]):
            r.c.add(path, "with perDeviceNodeSelection each device needs nodeName, nodeSelector or "
                          "allNodes")
    elif any(obj.get(k) for k in ("nodeName", "nodeSelector", "allNodes")):
        r.c.add(path, "device-level node selection needs spec.perDeviceNodeSelection: true")
    if obj.get("nodeAllocatableResourceMappings"):
        r.c.add(f"{path}.nodeAllocatableResourceMappings", "is an alpha field (off by default) "
                                                           "that fitgate does not model")
    conditions = r.get(obj, "bindingConditions", path, list, default=[])
    return model.Device(
        name=name, attributes=attributes, capacity=capacity, consumes_counters=tuple(consumes),
        taints=tuple(taints),
        allow_multiple_allocations=bool(r.get(obj, "allowMultipleAllocations", path, bool,
                                              default=False)),
        binding_conditions=tuple(str(x) for x in conditions),
        binds_to_node=bool(r.get(obj, "bindsToNode", path, bool, default=False)),
        **selection,
    )


def _request_policy(r: fields.Reader, raw: Any, path: str) -> model.RequestPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        r.c.add(path, "must be an object")
        return None
    default = r.quantity(raw["default"], f"{path}.default") if "default" in raw else None
    valid_values = tuple(
        q for i, v in enumerate(r.get(raw, "validValues", path, list, default=[]))
        if (q := r.quantity(v, f"{path}.validValues[{i}]")) is not None)
    if len(valid_values) > 10:
        r.c.add(f"{path}.validValues", "must have at most 10 entries")
    if any(a >= b for a, b in itertools.pairwise(valid_values)):
        r.c.add(f"{path}.validValues", "must be sorted ascending without duplicates")
    valid_range = None
    rng = r.get(raw, "validRange", path, Mapping)
    if rng is not None:
        lo = r.quantity(rng.get("min"), f"{path}.validRange.min")
        hi = r.quantity(rng["max"], f"{path}.validRange.max") if "max" in rng else None
        step = r.quantity(rng["step"], f"{path}.validRange.step") if "step" in rng else None
        if step is not None and step.value <= 0:
            r.c.add(f"{path}.validRange.step", "must be positive")
        if lo is not None:
            valid_range = model.ValidRange(lo, hi, step)
    if valid_values and valid_range is not None:
        r.c.add(path, "validValues and validRange are mutually exclusive")
    return model.RequestPolicy(default, valid_values, valid_range)


# ------------------------------------------------------------------------ DeviceClass


def device_class(obj: Mapping[str, Any], source: str | None = None) -> model.DeviceClass:
    c = collector(obj, "DeviceClass", source)
    r = fields.Reader(c)
    name, _ = fields.meta_name(r, obj)
    spec = r.get(obj, "spec", "", Mapping, default={})
    selectors = tuple(_selector(r, s, p) for p, s in r.items(spec, "selectors", "spec", limit=32))
    extended = r.get(spec, "extendedResourceName", "spec", str)
    c.raise_if_any()
    return model.DeviceClass(name, selectors, extended or None)


def _selector(r: fields.Reader, obj: Mapping[str, Any], path: str) -> str:
    cel_obj = r.get(obj, "cel", path, Mapping, required=True, default={})
    expression = cel_obj.get("expression") if isinstance(cel_obj, Mapping) else None
    return r.cel(expression, f"{path}.cel.expression")


# ------------------------------------------------------- ResourceClaim (and template)


def resource_claim(obj: Mapping[str, Any], source: str | None = None) -> model.Claim:
    """A ResourceClaim (its spec; status is read by `allocated_devices`)."""
    c = collector(obj, "ResourceClaim", source)
    r = fields.Reader(c)
    name, namespace = fields.meta_name(r, obj)
    spec = r.get(obj, "spec", "", Mapping, required=True, default={})
    claim = _claim_spec(r, spec, "spec", name, namespace or "default")
    c.raise_if_any()
    return claim


def claim_template(obj: Mapping[str, Any], source: str | None = None) -> model.Claim:
    """A ResourceClaimTemplate's claim spec; the claim is named after the template."""
    c = collector(obj, "ResourceClaimTemplate", source)
    r = fields.Reader(c)
    name, namespace = fields.meta_name(r, obj)
    outer = r.get(obj, "spec", "", Mapping, required=True, default={})
    spec = r.get(outer, "spec", "spec", Mapping, required=True, default={})
    claim = _claim_spec(r, spec, "spec.spec", name, namespace or "default")
    c.raise_if_any()
    return claim


def _claim_spec(r: fields.Reader, spec: Mapping[str, Any], path: str, name: str,
                namespace: str) -> model.Claim:
    devices = r.get(spec, "devices", path, Mapping, default={})
    dpath = f"{path}.devices"
    requests = []
    seen: set[str] = set()
    valid_refs: set[str] = set()
    for rpath, raw in r.items(devices, "requests", dpath, limit=32):
        request = _request(r, raw, rpath)
        if request.name in seen:
            r.c.add(f"{rpath}.name", f"duplicate request name {request.name!r}")
        seen.add(request.name)
        valid_refs.add(request.name)
        valid_refs.update(f"{request.name}/{sub.name}" for sub in request.first_available)
        requests.append(request)
    constraints = []
    for cpath, raw in r.items(devices, "constraints", dpath, limit=32):
        refs = r.get(raw, "requests", cpath, list, default=[])
        for i, ref in enumerate(refs):
            if not isinstance(ref, str):
                r.c.add(f"{cpath}.requests[{i}]", f"must be a string, got {type(ref).__name__}")
            elif ref not in valid_refs:
                r.c.add(f"{cpath}.requests[{i}]", f"{ref!r} names no request of this claim")
        match = raw.get("matchAttribute")
        distinct = raw.get("distinctAttribute")
        if (match is None) == (distinct is None):
            r.c.add(cpath, "exactly one of matchAttribute, distinctAttribute must be set")
        if match is not None:
            r.qualified_name(match, f"{cpath}.matchAttribute", require_domain=True)
        if distinct is not None:
            r.qualified_name(distinct, f"{cpath}.distinctAttribute", require_domain=True)
        constraints.append(model.Constraint(tuple(str(x) for x in refs), match, distinct))
    return model.Claim(name=name, namespace=namespace, requests=tuple(requests),
                       constraints=tuple(constraints))


def _request(r: fields.Reader, obj: Mapping[str, Any], path: str) -> model.DeviceRequest:
    name = r.name(obj.get("name"), f"{path}.name", fields.DNS_LABEL, "request name (DNS label)", 63)
    exactly = r.get(obj, "exactly", path, Mapping)
    first = r.items(obj, "firstAvailable", path, limit=8)
    if (exactly is None) == (not first):
        r.c.add(path, "exactly one of exactly, firstAvailable must be set")
    if exactly is not None:
        return model.DeviceRequest(name, exactly=_exact(r, exactly, f"{path}.exactly", name, True))
    subs = []
    seen: set[str] = set()
    for spath, raw in first:
        sub_name = r.name(raw.get("name"), f"{spath}.name", fields.DNS_LABEL,
                          "subrequest name (DNS label)", 63)
        if sub_name in seen:
            r.c.add(f"{spath}.name", f"duplicate subrequest name {sub_name!r}")
        seen.add(sub_name)
        subs.append(_exact(r, raw, spath, sub_name, False))
    return model.DeviceRequest(name, first_available=tuple(subs))


def _exact(r: fields.Reader, obj: Mapping[str, Any], path: str, name: str,
           admin_allowed: bool) -> model.ExactRequest:
    device_class = r.get(obj, "deviceClassName", path, str, required=True, default="")
    selectors = tuple(_selector(r, s, p) for p, s in r.items(obj, "selectors", path, limit=32))
    mode = r.get(obj, "allocationMode", path, str, default="ExactCount")
    if mode not in ("ExactCount", "All"):
        r.c.add(f"{path}.allocationMode", f"unknown allocation mode {mode!r}; ExactCount or All")
        mode = "ExactCount"
    count = r.get(obj, "count", path, int, default=1)
    if mode == "All" and "count" in obj and obj["count"] is not None:
        r.c.add(f"{path}.count", "must not be set with allocationMode All")
    # The API only requires count > 0. More than a claim may hold (32) is not bad input:
    # the allocator skips such a firstAvailable alternative (and a claim that needs more
    # than 32 devices is an error of the allocation, not of the object).
    if mode == "ExactCount" and count < 1:
        r.c.add(f"{path}.count", f"must be at least 1, got {count}")
    admin = r.get(obj, "adminAccess", path, bool, default=False)
    if admin and not admin_allowed:
        r.c.add(f"{path}.adminAccess", "is not allowed in a firstAvailable subrequest")
    tolerations = []
    for tpath, t in r.items(obj, "tolerations", path, limit=16):
        op = r.get(t, "operator", tpath, str, default="Equal")
        if op not in ("Exists", "Equal"):
            r.c.add(f"{tpath}.operator", f"unknown operator {op!r}; Exists or Equal")
            op = "Equal"
        effect = r.get(t, "effect", tpath, str, default="")
        if effect and effect not in _TAINT_EFFECTS:
            r.c.add(f"{tpath}.effect", f"unknown effect {effect!r}")
        value = r.get(t, "value", tpath, str, default="")
        if op == "Exists" and value:
            r.c.add(f"{tpath}.value", "must be empty with operator Exists")
        tolerations.append(model.DeviceToleration(r.get(t, "key", tpath, str, default=""), op,
                                                  value, effect))
    capacity_requests = None
    cap = r.get(obj, "capacity", path, Mapping)
    if cap is not None:
        capacity_requests = {}
        for key, raw in r.get(cap, "requests", f"{path}.capacity", Mapping, default={}).items():
            qpath = f"{path}.capacity.requests[{key!r}]"
            r.qualified_name(key, qpath, require_domain=False)
            q = r.quantity(raw, qpath)
            if q is not None:
                capacity_requests[key] = q
    # An alpha field (DRADerivedAttributes, off by default in 1.37): the API server drops
    # it on create while the gate is off, so a claim holds it only from a time the gate
    # was on; the default allocator then answers an error. Only its presence is read.
    derived = r.items(obj, "derivedAttributes", path, limit=32)
    return model.ExactRequest(name=name, device_class=device_class, selectors=selectors,
                              allocation_mode=mode, count=count if mode == "ExactCount" else 0,
                              admin_access=bool(admin), tolerations=tuple(tolerations),
                              capacity_requests=capacity_requests,
                              derived_attributes=bool(derived))


def allocated_devices(obj: Mapping[str, Any], source: str | None = None
                      ) -> list[model.AllocatedDevice]:
    """The devices an allocated ResourceClaim holds (empty when not allocated)."""
    c = collector(obj, "ResourceClaim", source)
    r = fields.Reader(c)
    status = r.get(obj, "status", "", Mapping, default={})
    allocation = r.get(status, "allocation", "status", Mapping)
    if allocation is None:
        return []
    devices = r.get(allocation, "devices", "status.allocation", Mapping, default={})
    out = []
    for path, res in r.items(devices, "results", "status.allocation.devices", limit=32):
        ident = model.DeviceId(r.get(res, "driver", path, str, required=True, default=""),
                               r.get(res, "pool", path, str, required=True, default=""),
                               r.get(res, "device", path, str, required=True, default=""))
        consumed = r.quantities(res, "consumedCapacity", path, negative=True)
        out.append(model.AllocatedDevice(
            ident, admin_access=bool(r.get(res, "adminAccess", path, bool, default=False)),
            share_id=r.get(res, "shareID", path, str), consumed_capacity=consumed))
    c.raise_if_any()
    return out


# ------------------------------------------------------------------------------- Node


def node(obj: Mapping[str, Any], source: str | None = None) -> model.Node:
    c = collector(obj, "Node", source)
    r = fields.Reader(c)
    name, _ = fields.meta_name(r, obj)
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    labels = r.get(meta, "labels", "metadata", Mapping, default={})
    spec = r.get(obj, "spec", "", Mapping, default={})
    taints = r.node_taints(spec, "spec")
    status = r.get(obj, "status", "", Mapping, default={})
    allocatable = r.quantities(status, "allocatable", "status", negative=True)
    c.raise_if_any()
    return model.Node(name=name, labels={str(k): str(v) for k, v in labels.items()},
                      taints=taints, allocatable=allocatable,
                      unschedulable=bool(spec.get("unschedulable", False)))


# -------------------------------------------------------------------------- inventory

PARSERS: dict[str, Callable[[Mapping[str, Any], str | None], Any]] = {
    "ResourceSlice": resource_slice,
    "DeviceClass": device_class,
    "ResourceClaim": resource_claim,
    "ResourceClaimTemplate": claim_template,
    "Node": node,
}


def inventory(slices: list[Mapping[str, Any]], classes: list[Mapping[str, Any]],
              allocated_claims: list[Mapping[str, Any]] = ()) -> model.Inventory:  # type: ignore[assignment]
    """Slices, classes and allocated claims as one Inventory; all errors reported together."""
    problems: list[errors.FieldError] = []
    parsed_slices = []
    parsed_classes: dict[str, model.DeviceClass] = {}
    results: list[model.AllocatedDevice] = []
    for obj in slices:
        try:
            parsed_slices.append(resource_slice(obj))
        except errors.InputError as exc:
            problems.extend(exc.errors)
    for obj in classes:
        try:
            dc = device_class(obj)
            parsed_classes[dc.name] = dc
        except errors.InputError as exc:
            problems.extend(exc.errors)
    for obj in allocated_claims:
        try:
            results.extend(allocated_devices(obj))
        except errors.InputError as exc:
            problems.extend(exc.errors)
    if problems:
        raise errors.InputError(problems)
    return model.Inventory(tuple(parsed_slices), parsed_classes,
                           model.AllocatedState.from_results(results))
