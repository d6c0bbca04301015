"""Typed reads of Kubernetes JSON that collect field errors instead of raising.

Shared by every parser (`fitcore.kube`, `fitcore.workload`): each problem is recorded with
its field path on an `errors.Collector`, and a default stands in so parsing goes on and
all problems are reported together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from fitcore import cel, errors, model, values

T = TypeVar("T")

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The largest quantity magnitude read. The API server keeps any decimal quantity
#: (1e10000 included), and the allocator's semantics past int64 (errors, "cannot be
#: represented") are followed up to here; beyond it, nothing real, and every later
#: decision, message and status would carry a number of thousands of digits.
QUANTITY_MAX = 10**100
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: Quantity texts read and within bounds: (the quantity, whether it is negative).
_READ: dict[str, tuple[values.Quantity, bool]] = {}
_READ_LIMIT = 1 << 16


class Reader:
    """Typed access to nested dicts that records errors instead of raising."""

    def __init__(self, collector: errors.Collector) -> None:
        self.c = collector

    def get(
        self, obj: Any, key: str, path: str, typ: type[T] | tuple[type, ...],
        default: Any = None, *, required: bool = False,
    ) -> Any:
        # `type(...) is dict` first: the ABC check is slow, and parsed JSON is dicts.
        value = obj.get(key) if type(obj) is dict or isinstance(obj, Mapping) else None
        if value is None:
            if required:
                self.c.add(f"{path}.{key}" if path else key, "required field is missing")
            return default
        # The exact type first (parsed JSON is dicts, lists, str, int): the ABC check of
        # `Mapping` is slow. bool is an int in Python: never accept it for a number.
        exact = type(value)
        if exact is not typ and not (typ is Mapping and exact is dict) and (
                (typ is int and exact is bool) or not isinstance(value, typ)):
            self.c.add(f"{path}.{key}" if path else key,
                       f"must be {_type_name(typ)}, got {exact.__name__}")
            return default
        if typ is int and not _INT64_MIN <= value <= _INT64_MAX:
            self.c.add(f"{path}.{key}" if path else key,
                       f"{value} does not fit in a 64-bit integer")
            return default
        return value

    def items(self, obj: Any, key: str, path: str, *, limit: int | None = None,
              required: bool = False) -> list[tuple[str, Any]]:
        seq = self.get(obj, key, path, list, required=required, default=[])
        where = f"{path}.{key}" if path else key
        if limit is not None and len(seq) > limit:
            self.c.add(where, f"must have at most {limit} entries, has {len(seq)}")
        out = []
        for i, item in enumerate(seq):
            if type(item) is not dict and not isinstance(item, Mapping):
                self.c.add(f"{where}[{i}]", f"must be an object, got {type(item).__name__}")
                continue
            out.append((f"{where}[{i}]", item))
        return out

    def quantity(self, value: Any, path: str) -> values.Quantity | None:
        got = self._quantity(value, path)
        return None if got is None else got[0]

    def _quantity(self, value: Any, path: str) -> tuple[values.Quantity, bool] | None:
        """The quantity and whether it is negative (None when it is refused): a text
        read before is answered from `_READ` (its bound and sign compare Fractions)."""
        if type(value) is str:
            hit = _READ.get(value)
            if hit is not None:
                return hit
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            self.c.add(path, f"must be a quantity string such as '40Gi', got {value!r}")
            return None
        try:
            q = values.Quantity.parse(value)
        except ValueError as exc:
            self.c.add(path, f"invalid quantity {value!r}: {exc}")
            return None
        if abs(q.value) > QUANTITY_MAX:
            shown = (repr(value) if isinstance(value, str) and len(value) <= 40
                     else "the quantity")
            self.c.add(path, f"{shown} is larger than fitgate decides with (at most 1e100 "
                             "in the quantity's unit)")
            return None
        got = (q, q.value < 0)
        if type(value) is str:
            if len(_READ) >= _READ_LIMIT:
                _READ.clear()
            _READ[value] = got
        return got

    def name(self, value: Any, path: str, pattern: re.Pattern[str], what: str,
             max_len: int) -> str:
        if not isinstance(value, str) or not value:
            self.c.add(path, f"must be a non-empty {what}")
            return ""
        if len(value) > max_len or not pattern.match(value):
            self.c.add(path, f"{value!r} is not a valid {what} (at most {max_len} characters)")
        return value

    def qualified_name(self, value: Any, path: str, *, require_domain: bool) -> str:
        """`domain/id` or (unless require_domain) a bare C-identifier `id`."""
        if not isinstance(value, str) or not value:
            self.c.add(path, "must be a non-empty qualified name")
            return ""
        domain, sep, ident = value.rpartition("/")
        if require_domain and not sep:
            self.c.add(path, f"{value!r} must be fully qualified as 'domain/name'")
            return value
        if sep and (len(domain) > 63 or not DNS_SUBDOMAIN.match(domain)):
            self.c.add(path, f"{value!r}: domain {domain!r} is not a DNS subdomain of at most 63 "
                             "characters")
        if len(ident) > 32 or not _C_IDENTIFIER.match(ident):
            self.c.add(path, f"{value!r}: name {ident!r} must be a C identifier of at most 32 "
                             "characters")
        return value

    def cel(self, expression: Any, path: str) -> str:
        if not isinstance(expression, str) or not expression:
            self.c.add(path, "must be a non-empty CEL expression")
            return ""
        try:
            cel.compile_selector(expression)
        except cel.CelError as exc:
            self.c.add(path, f"CEL does not compile: {exc.message}")
        return expression


    def quantities(self, obj: Any, key: str, path: str, *, negative: bool = False,
                   wrapped: bool = False, required: bool = False) -> dict[str, values.Quantity]:
        """A map of quantities, the one reader of them: resource requests and allocatable
        (never negative, as the API server validates them, unless `negative`), consumed
        capacity, counters (`wrapped`: each entry is `{value: ...}`)."""
        out = {}
        where = f"{path}.{key}" if path else key
        for name, raw in self.get(obj, key, path, Mapping, {}, required=required).items():
            qpath = f"{where}[{name!r}]"
            if wrapped:
                raw = raw.get("value") if isinstance(raw, Mapping) else None
                qpath += ".value"
            got = self._quantity(raw, qpath)
            if got is not None and got[1] and not negative:
                self.c.add(qpath, f"must not be negative, got {raw!r}")
            elif got is not None:
                out[str(name)] = got[0]
        return out

    def node_taints(self, obj: Any, path: str) -> tuple[model.Taint, ...]:
        """`taints` of a Node (or of a NodeShape's nodes), the one reader of them."""
        out = []
        for tpath, t in self.items(obj, "taints", path):
            effect = self.get(t, "effect", tpath, str, "NoSchedule", required=True)
            if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                self.c.add(f"{tpath}.effect", f"unknown effect {effect!r}")
            out.append(model.Taint(self.get(t, "key", tpath, str, "", required=True),
                                   self.get(t, "value", tpath, str, ""), effect))
        return tuple(out)

    def string_map(self, obj: Any, key: str, path: str) -> dict[str, str]:
        """A map of strings (labels, nodeSelector)."""
        out = {}
        for k, v in self.get(obj, key, path, Mapping, {}).items():
            if not isinstance(v, str):
                self.c.add(f"{path}.{key}[{k!r}]", f"must be a string, got {type(v).__name__}")
                continue
            out[str(k)] = v
        return out


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer",
             bool: "a boolean", Mapping: "an object"}
    if isinstance(typ, tuple):
        return " or ".join(names.get(t, t.__name__) for t in typ)
    return names.get(typ, typ.__name__)


def meta_name(r: Reader, obj: Any) -> tuple[str, str | None]:
    """metadata.name (required) and metadata.namespace."""
    meta = r.get(obj, "metadata", "", Mapping, required=True, default={})
    name = r.get(meta, "name", "metadata", str, required=True, default="")
    namespace = r.get(meta, "namespace", "metadata", str)
    return name, namespace


def node_selector(r: Reader, obj: Any, path: str) -> model.NodeSelector:
    terms = []
    for tpath, term in r.items(obj, "nodeSelectorTerms", path, required=True):
        terms.append(model.NodeSelectorTerm(
            tuple(_requirement(r, req, rp) for rp, req in r.items(term, "matchExpressions", tpath)),
            tuple(_requirement(r, req, rp) for rp, req in r.items(term, "matchFields", tpath)),
        ))
    if not terms:
        r.c.add(f"{path}.nodeSelectorTerms", "must have at least one term")
    return model.NodeSelector(tuple(terms))


def requirement(r: Reader, obj: Mapping[str, Any], path: str) -> model.NodeSelectorRequirement:
    """One node selector requirement (key, operator, values)."""
    return _requirement(r, obj, path)


def _requirement(r: Reader, obj: Mapping[str, Any], path: str) -> model.NodeSelectorRequirement:
    key = r.get(obj, "key", path, str, required=True, default="")
    op = r.get(obj, "operator", path, str, required=True, default="In")
    if op not in _SELECTOR_OPS:
        r.c.add(f"{path}.operator", f"unknown operator {op!r}; one of {sorted(_SELECTOR_OPS)}")
        op = "In"
    vals = r.get(obj, "values", path, list, default=[])
    if not all(isinstance(v, str) for v in vals):
        r.c.add(f"{path}.values", "must be a list of strings")
        vals = [str(v) for v in vals]
    return model.NodeSelectorRequirement(key, op, tuple(vals))
