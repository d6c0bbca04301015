"""Worst-case cost of a DRA CEL selector, estimated as the Kubernetes API server does.

The API server refuses a device selector whose *estimated* worst-case cost exceeds
``CELSelectorExpressionMaxCost`` (1,000,000). The estimate is cel-go's static cost
model over the type-checked expression, refined by the Kubernetes CEL libraries' call
costs and by the size bounds the DRA environment declares for ``device``. The C++ runtime
we evaluate with has no cost tracking, so this module recomputes that estimate from the
checked AST that ``cel_expr_python``'s ``Expression.serialize()`` returns (a
``google.protobuf.Any`` holding a ``cel.expr.CheckedExpr``). The protobuf schema of the
few ``cel.expr`` messages we read is declared here, field numbers as published in the
CEL specification; fields we do not read are skipped as unknown fields.

The model, as we implement it (costs are ``(min, max)`` ranges; only ``max`` is compared
with the limit; all arithmetic saturates at 2^64 - 1):

- literal 0; identifier 1; field selection 1 more when the operand is a map or a message;
  ``has()`` its operand only (Kubernetes turns cel-go's presence-test cost off).
  ``device.x`` is one declared name here but an identifier and a selection in
  Kubernetes, so it costs 2.
- list literal 10 plus its elements, map literal 30, message literal 40.
- a call costs its target and arguments plus the function's own cost: 1 for most
  functions; string traversals at 0.1 per character (``==``/``!=``/ordering of strings by
  the shorter operand's maximum, ``+`` of strings by the result, ``startsWith``,
  ``endsWith``, ``contains`` (product of both), ``quote``, ``format``), regular
  expressions (``matches``, ``find``, ``findAll``) at (string + 1) * 0.1 times the
  pattern's length * 0.25, ``in`` a list by the list's size, the Kubernetes string
  and list functions (``lowerAscii``, ``upperAscii``, ``substring``, ``trim``,
  ``replace``, ``split``, ``join``, ``indexOf``, ``lastIndexOf``, ``isSorted``, ``sum``,
  ``min``, ``max``) by the sizes they traverse, ``quantity``, ``isQuantity``,
  ``semver``, ``isSemver`` by their string's size; ``&&``/``||`` and ``?:`` cost their
  operands (the dearer branch).
- a comprehension costs its range and initial accumulator plus, per element of the
  range's maximum size, its loop condition and step; ``cel.bind`` costs an empty list (10),
  its value and its body.
- sizes: literals are exact; ``+`` adds; ``device`` data has Kubernetes' bounds: at most
  32 domains and 32 ids per domain, domains 63 and ids 32 characters, attribute values
  64, the driver name 63; a value of unknown size counts as 2^64 - 1.

Checked against the ``expectCost`` figures of ``k8s.io/dynamic-resource-allocation/cel``'s
``compile_test.go`` (``tests/fitcore/test_cel_cost.py``: every row whose constructs we
declare, equal) and against the upstream estimate itself on 3,000 generated selectors
(``bench/oracle/test_cel_cost.py``, ``make oracle-test``: every one both sides compile,
equal, on Kubernetes 1.36 and 1.37). Known differences:

- Only what fitcore's environment declares is modelled: the IP, CIDR, URL, authz and
  format libraries and two-variable comprehensions do not compile here at all.
- The cost of ``format`` follows the current cel-go rule (the format string's size);
  cel-go releases have changed it.
- ``join``, ``isSorted``, ``sum``, ``min`` and ``max`` over a list of strings: Kubernetes'
  library knows an element's size only from a declared path, so over a list literal
  (``["a", "b"].join("-")``) its estimate is unbounded and the API server refuses the
  selector (newer cel-go releases add their own estimators for these). We use the element
  sizes we track (literals, ``+``), so we accept such selectors with a bounded estimate:
  more lenient, never stricter, and still bounded for every value we can size. The
  isSorted/sum/min/max/indexOf rule is the 1.36 one (1.37 adds ``includes``, which
  fitcore does not declare).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Final

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

__all__ = ["MAX_UINT64", "estimate_max_cost"]

MAX_UINT64: Final = 2**64 - 1

_STRING_TRAVERSAL: Final = 0.1
_REGEX_LENGTH: Final = 0.25
_LIST_CREATE: Final = 10
_MAP_CREATE: Final = 30
_STRUCT_CREATE: Final = 40
_ACCUMULATORS: Final = ("@result", "@__result__")

Range = tuple[int, int]
_UNKNOWN: Final[Range] = (0, MAX_UINT64)


def _add(a: Range, b: Range) -> Range:
    return (min(a[0] + b[0], MAX_UINT64), min(a[1] + b[1], MAX_UINT64))


def _mul(a: Range, b: Range) -> Range:
    return (min(a[0] * b[0], MAX_UINT64), min(a[1] * b[1], MAX_UINT64))


def _factor(a: Range, factor: float) -> Range:
    def one(x: int) -> int:
        if x > 0 and factor > 0 and x > MAX_UINT64 / factor:
            return MAX_UINT64
        value = math.ceil(float(x) * factor)
        return MAX_UINT64 if value >= 2**64 else int(value)
    return (one(a[0]), one(a[1]))


def _union(a: Range, b: Range) -> Range:
    return (min(a[0], b[0]), max(a[1], b[1]))


def _fixed(n: int) -> Range:
    return (n, n)


# -- the cel.expr messages we read ---------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto


def _message(file: Any, name: str, fields: list[tuple[str, int, int, str | None, bool]]) -> None:
    msg = file.message_type.add(name=name)
    for fname, number, ftype, type_name, repeated in fields:
        f = msg.field.add(name=fname, number=number, type=ftype,
                          label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
        if type_name:
            f.type_name = ".cel.expr." + type_name


@functools.cache
def _classes() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(name="fitgate/cel_expr_subset.proto",
                                              package="cel.expr", syntax="proto3")
    msg, s, i64, b, rep = _F.TYPE_MESSAGE, _F.TYPE_STRING, _F.TYPE_INT64, _F.TYPE_BOOL, True
    _message(file, "Constant", [
        ("null_value", 1, _F.TYPE_INT32, None, False), ("bool_value", 2, b, None, False),
        ("int64_value", 3, i64, None, False), ("uint64_value", 4, _F.TYPE_UINT64, None, False),
        ("double_value", 5, _F.TYPE_DOUBLE, None, False), ("string_value", 6, s, None, False),
        ("bytes_value", 7, _F.TYPE_BYTES, None, False)])
    _message(file, "Ident", [("name", 1, s, None, False)])
    _message(file, "Select", [("operand", 1, msg, "Expr", False), ("field", 2, s, None, False),
                              ("test_only", 3, b, None, False)])
    _message(file, "Call", [("target", 1, msg, "Expr", False), ("function", 2, s, None, False),
                            ("args", 3, msg, "Expr", rep)])
    _message(file, "CreateList", [("elements", 1, msg, "Expr", rep)])
    _message(file, "Entry", [("field_key", 2, s, None, False), ("map_key", 3, msg, "Expr", False),
                             ("value", 4, msg, "Expr", False)])
    _message(file, "CreateStruct", [("message_name", 1, s, None, False),
                                    ("entries", 2, msg, "Entry", rep)])
    _message(file, "Comprehension", [
        ("iter_var", 1, s, None, False), ("iter_range", 2, msg, "Expr", False),
        ("accu_var", 3, s, None, False), ("accu_init", 4, msg, "Expr", False),
        ("loop_condition", 5, msg, "Expr", False), ("loop_step", 6, msg, "Expr", False),
        ("result", 7, msg, "Expr", False), ("iter_var2", 8, s, None, False)])
    _message(file, "Expr", [
        ("id", 2, i64, None, False), ("const_expr", 3, msg, "Constant", False),
        ("ident_expr", 4, msg, "Ident", False), ("select_expr", 5, msg, "Select", False),
        ("call_expr", 6, msg, "Call", False), ("list_expr", 7, msg, "CreateList", False),
        ("struct_expr", 8, msg, "CreateStruct", False),
        ("comprehension_expr", 9, msg, "Comprehension", False)])
    for fields_msg in file.message_type:
        if fields_msg.name == "Expr":
            for f in fields_msg.field:
                if f.number >= 3:
                    f.oneof_index = 0
            fields_msg.oneof_decl.add(name="expr_kind")
        if fields_msg.name == "Constant":
            for f in fields_msg.field:
                f.oneof_index = 0
            fields_msg.oneof_decl.add(name="constant_kind")
    _message(file, "ListType", [("elem_type", 1, msg, "Type", False)])
    _message(file, "MapType", [("key_type", 1, msg, "Type", False),
                               ("value_type", 2, msg, "Type", False)])
    _message(file, "AbstractType", [("name", 1, s, None, False),
                                    ("parameter_types", 2, msg, "Type", rep)])
    _message(file, "Type", [
        ("dyn", 1, _F.TYPE_BYTES, None, False), ("null", 2, _F.TYPE_INT32, None, False),
        ("primitive", 3, _F.TYPE_INT32, None, False), ("wrapper", 4, _F.TYPE_INT32, None, False),
        ("well_known", 5, _F.TYPE_INT32, None, False), ("list_type", 6, msg, "ListType", False),
        ("map_type", 7, msg, "MapType", False), ("message_type", 9, s, None, False),
        ("type_param", 10, s, None, False), ("type", 11, msg, "Type", False),
        ("abstract_type", 14, msg, "AbstractType", False)])
    type_msg = file.message_type[-1]
    for f in type_msg.field:
        f.oneof_index = 0
    type_msg.oneof_decl.add(name="type_kind")
    _message(file, "Reference", [("name", 1, s, None, False), ("overload_id", 3, s, None, rep)])
    _message(file, "ReferenceEntry", [("key", 1, i64, None, False),
                                      ("value", 2, msg, "Reference", False)])
    _message(file, "TypeEntry", [("key", 1, i64, None, False), ("value", 2, msg, "Type", False)])
    _message(file, "CheckedExpr", [("reference_map", 2, msg, "ReferenceEntry", rep),
                                   ("type_map", 3, msg, "TypeEntry", rep),
                                   ("expr", 4, msg, "Expr", False)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName("cel.expr." + name))
            for name in ("CheckedExpr",)}


# -- types ---------------------------------------------------------------------------

_PRIMITIVE_KINDS: Final = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN_KINDS: Final = {1: "any", 2: "timestamp", 3: "duration"}
_SCALARS: Final = frozenset({"bool", "double", "duration", "int", "timestamp", "uint"})


def _kind(t: Any) -> str:
    if t is None:
        return "dyn"
    which = t.WhichOneof("type_kind")
    if which == "primitive":
        return _PRIMITIVE_KINDS.get(t.primitive, "unknown")
    if which == "well_known":
        return _WELL_KNOWN_KINDS.get(t.well_known, "unknown")
    return {"list_type": "list", "map_type": "map", "message_type": "struct",
            "type_param": "typeparam", "abstract_type": "opaque", "null": "null",
            "dyn": "dyn", "type": "type", "wrapper": "wrapper"}.get(which or "", "unknown")


def _is_scalar(t: Any) -> bool:
    kind = _kind(t)
    if kind in _SCALARS:
        return True
    if kind == "opaque" and t.abstract_type.name == "optional_type":
        params = t.abstract_type.parameter_types
        return bool(params) and _is_scalar(params[0])
    return False


# -- the DRA environment's declared bounds -------------------------------------------

@dataclass(frozen=True)
class _Decl:
    """A declared value: its maximum size, and what is inside it."""

    max_elements: int
    key: _Decl | None = None
    elem: _Decl | None = None
    fields: dict[str, _Decl] = field(default_factory=dict)
    attribute_values: bool = False  # a map whose every field name is an attribute


_ATTRIBUTE: Final = _Decl(64)  # DeviceAttributeMaxValueLength
_QUANTITY: Final = _Decl(0)
_DOMAIN: Final = _Decl(63)
_ID: Final = _Decl(32)
_MAX_ENTRIES: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_DEVICE: Final = _Decl(0, fields={
    "driver": _Decl(63),
    "allowMultipleAllocations": _Decl(1),
    "attributes": _Decl(_MAX_ENTRIES, key=_DOMAIN, elem=_Decl(
        _MAX_ENTRIES, key=_ID, elem=_ATTRIBUTE, attribute_values=True)),
    "capacity": _Decl(_MAX_ENTRIES, key=_DOMAIN, elem=_Decl(
        _MAX_ENTRIES, key=_ID, elem=_QUANTITY)),
})
_DEVICE_VARIABLE: Final = "device"


def _declared_size(path: list[str] | None) -> Range | None:
    if not path or path[0] != _DEVICE_VARIABLE:
        return None
    node = _DEVICE
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name in ("@keys", "@indices"):
            if name == "@indices" or node.key is None:
                return None
            node = node.key
        elif name in node.fields:
            node = node.fields[name]
        elif node.attribute_values:
            node = _ATTRIBUTE
        else:
            return None
    return (0, node.max_elements)


# -- the estimator -------------------------------------------------------------------

@dataclass
class _Entry:
    """Sizes of a container's keys (indices) and values."""

    container: str
    key: Range
    val: Range

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.container, _union(self.key, other.key), _union(self.val, other.val))


@dataclass
class _Local:
    path: list[str] | None
    size: Range | None
    entry: _Entry | None


@dataclass
class _Node:
    """What a call's cost depends on, for one operand."""

    expr: Any
    path: list[str] | None
    type: Any
    size: Range | None

    def size_or_unknown(self) -> Range:
        return self.size if self.size is not None else _UNKNOWN


class _Coster:
    def __init__(self, checked: Any, qualified: frozenset[str]):
        self.types = {entry.key: entry.value for entry in checked.type_map}
        self.overloads = {entry.key: list(entry.value.overload_id)
                          for entry in checked.reference_map}
        self.qualified = qualified
        self.paths: dict[int, list[str]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}

    # bookkeeping
    def type_of(self, e: Any) -> Any:
        return self.types.get(e.id)

    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, local: _Local) -> None:
        self.locals.setdefault(name, []).append(local)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def path(self, e: Any) -> list[str] | None:
        if e.WhichOneof("expr_kind") == "ident_expr":
            local = self.local(e.ident_expr.name)
            if local is not None:
                return None if local.path is None else list(local.path)
        found = self.paths.get(e.id)
        return None if found is None else list(found)

    def set_path(self, e: Any, path: list[str] | None) -> None:
        if path is not None:
            self.paths[e.id] = path

    def child_path(self, e: Any, suffix: str) -> list[str] | None:
        base = self.path(e)
        return None if base is None else [*base, suffix]

    def size(self, e: Any) -> Range | None:
        if e.id in self.sizes:
            return self.sizes[e.id]
        literal = _literal_size(e)
        if literal is not None:
            return literal
        declared = _declared_size(self.path(e))
        if declared is not None:
            self.sizes[e.id] = declared
            return declared
        if _is_scalar(self.type_of(e)):
            return _fixed(1)
        if e.WhichOneof("expr_kind") == "ident_expr":
            local = self.local(e.ident_expr.name)
            if local is not None and local.size is not None:
                return local.size
        return None

    def size_or_unknown(self, e: Any) -> Range:
        found = self.size(e)
        return found if found is not None else _UNKNOWN

    def entry(self, e: Any) -> _Entry | None:
        if e.id in self.entries:
            return self.entries[e.id]
        if e.WhichOneof("expr_kind") == "ident_expr":
            local = self.local(e.ident_expr.name)
            if local is not None:
                return local.entry
        return None

    def set_size(self, e: Any, size: Range | None) -> None:
        if size is not None:
            self.sizes[e.id] = size

    def set_entry(self, e: Any, entry: _Entry | None) -> None:
        if entry is not None:
            self.entries[e.id] = entry

    def node(self, e: Any) -> _Node:
        path = self.path(e)
        if path and path[0] in _ACCUMULATORS:
            path = None
        return _Node(e, path, self.type_of(e), self.size(e))

    # costs
    def cost(self, e: Any) -> Range:
        kind = e.WhichOneof("expr_kind")
        if kind == "const_expr":
            return _fixed(0)
        if kind == "ident_expr":
            return self.ident(e)
        if kind == "select_expr":
            return self.select(e)
        if kind == "call_expr":
            return self.call(e)
        if kind == "list_expr":
            return self.create_list(e)
        if kind == "struct_expr":
            return self.create_struct(e)
        if kind == "comprehension_expr":
            return self.bind(e) if self.is_bind(e) else self.comprehension(e)
        return _fixed(0)

    def ident(self, e: Any) -> Range:
        name = e.ident_expr.name
        local = self.local(name)
        if local is not None:
            self.set_path(e, None if local.path is None else list(local.path))
            return _fixed(1)
        if name in self.qualified:  # `device.x`: an identifier and a selection upstream
            self.set_path(e, name.split("."))
            return _fixed(2)
        self.set_path(e, [name])
        return _fixed(1)

    def select(self, e: Any) -> Range:
        sel = e.select_expr
        if sel.test_only:  # Kubernetes' environment gives presence tests no cost
            return self.cost(sel.operand)
        total = self.cost(sel.operand)
        if _kind(self.type_of(sel.operand)) in ("map", "struct", "typeparam"):
            total = _add(total, _fixed(1))
        self.set_path(e, self.child_path(sel.operand, sel.field))
        return total

    def call(self, e: Any) -> Range:
        call = e.call_expr
        args = list(call.args)
        if call.function == "dyn" and len(args) == 1:
            arg_cost = self.cost(args[0])
            self.set_size(e, self.size(args[0]))
            self.set_entry(e, self.entry(args[0]))
            return _add(_fixed(1), arg_cost)
        arg_costs = [self.cost(arg) for arg in args]
        arg_nodes = [self.node(arg) for arg in args]
        overloads = self.overloads.get(e.id, [])
        if not overloads:
            return _fixed(0)
        total = _fixed(0)
        target: _Node | None = None
        if call.HasField("target"):
            total = self.cost(call.target)
            target = self.node(call.target)
        function_cost: Range = (MAX_UINT64, 0)
        result_size: Range | None = None
        for overload in overloads:
            cost, size = self.function_cost(e, call.function, overload, target, arg_nodes,
                                            arg_costs)
            function_cost = _union(function_cost, cost)
            if size is not None:
                result_size = size if result_size is None else _union(result_size, size)
            if overload in ("index_list", "index_map") and args:
                entry = self.entry(args[0])
                result_size = None if entry is None else entry.val
                suffix = "@items" if overload == "index_list" else "@values"
                self.set_path(e, self.child_path(args[0], suffix))
            if result_size is None:
                result_size = self.size(e)
        self.set_size(e, result_size)
        return _add(total, function_cost)

    def create_list(self, e: Any) -> Range:
        total = _fixed(0)
        elements = list(e.list_expr.elements)
        item: Range = (0 if not elements else MAX_UINT64, 0)
        for element in elements:
            total = _add(total, self.cost(element))
            item = _union(item, self.size_or_unknown(element))
        self.set_entry(e, _Entry("list", _fixed(1), item))
        return _add(total, _fixed(_LIST_CREATE))

    def create_struct(self, e: Any) -> Range:
        entries = list(e.struct_expr.entries)
        total = _fixed(0)
        if e.struct_expr.message_name:
            for entry in entries:
                total = _add(total, self.cost(entry.value))
            return _add(total, _fixed(_STRUCT_CREATE))
        empty = not entries
        keys: Range = (0 if empty else MAX_UINT64, 0)
        vals: Range = (0 if empty else MAX_UINT64, 0)
        for entry in entries:
            total = _add(total, self.cost(entry.map_key))
            total = _add(total, self.cost(entry.value))
            keys = _union(keys, self.size_or_unknown(entry.map_key))
            vals = _union(vals, self.size_or_unknown(entry.value))
        self.set_entry(e, _Entry("map", keys, vals))
        return _add(total, _fixed(_MAP_CREATE))

    def is_bind(self, e: Any) -> bool:
        comp = e.comprehension_expr
        rng, cond = comp.iter_range, comp.loop_condition
        return (rng.WhichOneof("expr_kind") == "list_expr" and not rng.list_expr.elements
                and cond.WhichOneof("expr_kind") == "const_expr"
                and cond.const_expr.WhichOneof("constant_kind") == "bool_value"
                and not cond.const_expr.bool_value and comp.accu_var != _ACCUMULATORS[0])

    def push_local(self, name: str, e: Any) -> None:
        self.push(name, _Local(self.path(e), self.size(e), self.entry(e)))

    def bind(self, e: Any) -> Range:
        comp = e.comprehension_expr
        total = _add(self.cost(comp.iter_range), self.cost(comp.accu_init))
        self.push_local(comp.accu_var, comp.accu_init)
        total = _add(total, self.cost(comp.result))
        self.pop(comp.accu_var)
        self.set_size(e, self.size(comp.result))
        self.set_entry(e, self.entry(comp.result))
        return total

    def comprehension(self, e: Any) -> Range:
        comp = e.comprehension_expr
        total = _add(self.cost(comp.iter_range), self.cost(comp.accu_init))
        self.push_local(comp.accu_var, comp.accu_init)
        entry = self.entry(comp.iter_range)
        container = entry.container if entry is not None else _kind(self.type_of(comp.iter_range))
        if container == "list":
            size, suffix = (entry.val if entry is not None else None), "@items"
        else:
            size, suffix = (entry.key if entry is not None else None), "@keys"
        self.push(comp.iter_var, _Local(self.child_path(comp.iter_range, suffix), size, None))
        loop = self.cost(comp.loop_condition)
        step = self.cost(comp.loop_step)
        self.pop(comp.iter_var)
        total = _add(total, self.cost(comp.result))
        self.pop(comp.accu_var)
        count = self.size_or_unknown(comp.iter_range)
        total = _add(total, _mul(count, _add(step, loop)))
        init_kind = comp.accu_init.WhichOneof("expr_kind")
        if init_kind == "const_expr":
            self.set_size(e, self.size(comp.accu_init))
        elif init_kind in ("list_expr", "struct_expr"):
            self.set_size(e, count)
            self.set_entry(e, self.entry(comp.loop_step))
        return total

    def function_cost(self, e: Any, function: str, overload: str, target: _Node | None,
                      args: list[_Node], arg_costs: list[Range]) -> tuple[Range, Range | None]:
        arg_sum = _fixed(0)
        for cost in arg_costs:
            arg_sum = _add(arg_sum, cost)
        library = self.library_cost(function, target, args)
        if library is not None:
            return _add(library[0], arg_sum), library[1]
        if overload == "string_format" and target is not None and args:
            size = _add(target.size_or_unknown(), args[0].size_or_unknown())
            return _add(_factor(target.size_or_unknown(), _STRING_TRAVERSAL), arg_sum), size
        if overload == "strings_quote" and len(args) == 1:
            sz = args[0].size_or_unknown()
            size = (min(sz[0] + 2, MAX_UINT64), min(sz[1] * 2 + 2, MAX_UINT64))
            return _add(_factor(sz, _STRING_TRAVERSAL), arg_sum), size
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return _add(_factor(args[0].size_or_unknown(), _STRING_TRAVERSAL), arg_sum), None
        if overload == "in_list" and len(args) == 2:
            return _add(_factor(args[1].size_or_unknown(), 1), arg_sum), None
        if overload == "matches_string" and target is not None and len(args) == 1:
            text = _factor(_add(target.size_or_unknown(), _fixed(1)), _STRING_TRAVERSAL)
            regex = _factor(args[0].size_or_unknown(), _REGEX_LENGTH)
            return _add(_mul(text, regex), arg_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            text = _factor(target.size_or_unknown(), _STRING_TRAVERSAL)
            sub = _factor(args[0].size_or_unknown(), _STRING_TRAVERSAL)
            return _add(_mul(text, sub), arg_sum), None
        if overload in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs[0], arg_costs[1]
            return (lhs[0], _add(lhs, rhs)[1]), None
        if overload == "conditional":
            size = _union(args[1].size_or_unknown(), args[2].size_or_unknown())
            true_entry = self.entry(args[1].expr)
            self.set_entry(e, None if true_entry is None
                           else true_entry.union(self.entry(args[2].expr)))
            return _add(arg_costs[0], _union(arg_costs[1], arg_costs[2])), size
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            size = _add(args[0].size_or_unknown(), args[1].size_or_unknown())
            left = self.entry(args[0].expr)
            self.set_entry(e, None if left is None else left.union(self.entry(args[1].expr)))
            if overload == "add_list":
                return _add(_fixed(1), arg_sum), size
            return _add(_factor(size, _STRING_TRAVERSAL), arg_sum), size
        if overload in _SIZED_COMPARISONS:
            smallest = min(args[0].size_or_unknown()[1], args[1].size_or_unknown()[1])
            low = 1 if smallest > 0 else 0
            return _add(_factor((low, smallest), _STRING_TRAVERSAL), arg_sum), None
        return _add(_fixed(1), arg_sum), None

    def library_cost(self, function: str, target: _Node | None,
                     args: list[_Node]) -> tuple[Range, Range | None] | None:
        """The Kubernetes CEL libraries' call costs, for the functions fitcore declares."""
        if function in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"):
            if target is None:
                return None
            element = self.element_type(target)
            if element is not None:
                per_item = _fixed(1)
                if _kind(element) in ("string", "bytes"):
                    item_size = self.item_size(target)
                    per_item = _add(per_item, _factor(item_size or _UNKNOWN, _STRING_TRAVERSAL))
                return _mul(target.size_or_unknown(), per_item), None
            return _factor(target.size_or_unknown(), _STRING_TRAVERSAL), None
        if function in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            size = target.size_or_unknown()
            return _factor(size, _STRING_TRAVERSAL), size
        if function == "replace" and target is not None and len(args) >= 2:
            return _replace_cost(target.size_or_unknown(), args[0].size_or_unknown(),
                                 args[1].size_or_unknown())
        if function == "split" and target is not None:
            size = target.size_or_unknown()
            most = size[1]
            if len(args) > 1:
                limit = args[1].expr
                if (limit.WhichOneof("expr_kind") == "const_expr"
                        and limit.const_expr.WhichOneof("constant_kind") == "int64_value"):
                    most = limit.const_expr.int64_value % 2**64
            return _factor(size, 2 * _STRING_TRAVERSAL), (0, most)
        if function == "join" and target is not None:
            count = target.size_or_unknown()
            joined = _fixed(0)
            element = self.element_type(target)
            if element is not None:
                joined = _mul(count, self.item_size(target) or _UNKNOWN)
            if args:
                separators = (max(count[0] - 1, 0), max(count[1] - 1, 0))
                joined = _add(joined, _mul(args[0].size_or_unknown(), separators))
            return _factor(joined, _STRING_TRAVERSAL), joined
        if function in ("find", "findAll") and target is not None and args:
            size = target.size_or_unknown()
            text = _factor(_add(size, _fixed(1)), _STRING_TRAVERSAL)
            regex = _factor(args[0].size_or_unknown(), _REGEX_LENGTH)
            return _mul(text, regex), (0, size[1])
        if function in ("quantity", "isQuantity", "semver", "isSemver") and args:
            return _factor(args[0].size_or_unknown(), _STRING_TRAVERSAL), None
        if function in _NOMINAL:
            return _fixed(1), None
        if function == "_==_" and len(args) == 2:
            left, right = args[0].type, args[1].type
            if (_kind(left) == "struct" and left == right
                    and left.message_type in ("kubernetes.Quantity", "kubernetes.Semver")):
                return _fixed(1), None
        return None

    def item_size(self, list_node: _Node) -> Range | None:
        """A list's element size: declared, or (unlike Kubernetes) tracked from literals."""
        declared = _declared_size(None if list_node.path is None
                                  else [*list_node.path, "@items"])
        if declared is not None:
            return declared
        entry = self.entry(list_node.expr)
        return entry.val if entry is not None and entry.container == "list" else None

    def element_type(self, list_node: _Node) -> Any:
        t = list_node.type
        if _kind(t) == "list":
            return t.list_type.elem_type
        return None


_SIZED_COMPARISONS: Final = frozenset({
    "less_string", "greater_string", "less_equals_string", "greater_equals_string",
    "less_bytes", "greater_bytes", "less_equals_bytes", "greater_equals_bytes",
    "equals", "not_equals"})
_NOMINAL: Final = frozenset({
    "sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan",
    "compareTo", "add", "sub", "major", "minor", "patch"})


def _replace_cost(size: Range, old: Range, new: Range) -> tuple[Range, Range]:
    """Kubernetes' estimate for ``s.replace(old, new)``: the result's size bounds."""
    if old[0] == 0:
        most_count = size[1] + 1 if size[1] < MAX_UINT64 else size[1]
        kept_most = size[1]
    elif new[1] <= old[0]:
        most_count, kept_most = 0, size[1]
    else:
        most_count, kept_most = math.ceil(size[1] / old[0]), 0
    if old[1] == 0:
        least_count = size[0] + 1 if size[0] < MAX_UINT64 else size[0]
        kept_least = size[0]
    elif old[1] <= new[0]:
        least_count, kept_least = 0, size[0]
    else:
        least_count, kept_least = math.ceil(size[0] / old[1]), 0
    result = _add(_mul((least_count, most_count), new), (kept_least, kept_most))
    return _factor(size, 2 * _STRING_TRAVERSAL), result


def _literal_size(e: Any) -> Range | None:
    kind = e.WhichOneof("expr_kind")
    if kind == "const_expr":
        which = e.const_expr.WhichOneof("constant_kind")
        if which == "string_value":
            return _fixed(len(e.const_expr.string_value))
        if which == "bytes_value":
            return _fixed(len(e.const_expr.bytes_value))
        if which is not None:
            return _fixed(1)
        return None
    if kind == "list_expr":
        return _fixed(len(e.list_expr.elements))
    if kind == "struct_expr" and not e.struct_expr.message_name:
        return _fixed(len(e.struct_expr.entries))
    return None


def estimate_max_cost(serialized: bytes, qualified: frozenset[str]) -> int:
    """The worst-case cost of a checked expression, from ``Expression.serialize()``.

    `qualified` names the declared variables that are a field of ``device`` upstream
    (``device.attributes`` & co.). Raises ValueError if the bytes are not a CheckedExpr.
    """
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    if not wrapper.type_url.endswith("/cel.expr.CheckedExpr"):
        raise ValueError(f"not a checked CEL expression: {wrapper.type_url!r}")
    checked = _classes()["CheckedExpr"]()
    checked.ParseFromString(wrapper.value)
    return _Coster(checked, qualified).cost(checked.expr)[1]
