"""DRA CEL device selectors, evaluated the way kube-scheduler evaluates them.

A selector is a CEL expression over one variable, ``device``, that must yield a bool.
We compile and run it with ``cel-expr-python``, the CEL project's Python binding of
its C++ runtime: it has a real type checker (undeclared names, unknown functions,
wrong overloads and non-bool results are compile errors, as in Kubernetes) and the
standard extensions Kubernetes enables. On top of it this module rebuilds the
environment of ``k8s.io/dynamic-resource-allocation/cel``:

``device``
    Declared as the qualified variables ``device.driver`` (string),
    ``device.attributes`` (map of domain → map of id → dyn), ``device.capacity`` (map
    of domain → map of id → Quantity) and ``device.allowMultipleAllocations`` (bool).
    CEL resolves ``device.attributes`` to the longest declared name, so selectors read
    exactly as in Kubernetes; ``device`` on its own is not a value (see gaps).
Attributes
    Names as written in the ResourceSlice: ``domain/id``, or a bare ``id`` that belongs
    to the driver's domain. They are grouped by domain for CEL. Values are int, bool,
    string or semver.
Unknown domains
    ``device.attributes["other.domain"]`` is an empty map, not an error; a missing id
    inside a map is the runtime error "no such key". The C++ runtime has no map with a
    default, so when an evaluation fails on a key that the device lacks at the domain
    level we add that domain as an empty map and evaluate again (at most once per key).
Kubernetes libraries
    ``semver`` (``semver``, ``isSemver`` with the optional normalize flag, ``major``,
    ``minor``, ``patch``, ``isGreaterThan``, ``isLessThan``, ``compareTo``), ``quantity``
    (``quantity``, ``isQuantity``, ``sign(q)`` -- global, as upstream declares it --,
    ``isInteger``, ``asInteger``,
    ``asApproximateFloat``, ``add``, ``sub``, ``isGreaterThan``, ``isLessThan``,
    ``compareTo``), the regex library (``find``, ``findAll``; ``matches`` is built in)
    and the lists library (``isSorted``, ``sum``, ``min``, ``max``) are implemented
    here in Python. ``cel.bind``, optional types and
    the strings extension at version 2 (``lowerAscii``, ``upperAscii``, ``split``,
    ``join``, ``replace``, ``trim``, ``indexOf``, ``substring``, ``charAt``, ``format``,
    ``strings.quote``, ...) come from the C++ runtime.
Semver and Quantity values
    The binding can only pass protobuf messages as custom values, so ``kubernetes.Semver``
    and ``kubernetes.Quantity`` are small messages built at import time. A Quantity
    message holds its exact value in canonical form and a Semver message holds only the
    precedence-relevant parts, so CEL's structural ``==`` is Kubernetes' semantic
    equality (``quantity("1") == quantity("1000m")``, ``semver("1.0.0+a") ==
    semver("1.0.0")``). The C++ runtime registers member functions by argument *kind*,
    so ``isGreaterThan`` & co. have one Python implementation that dispatches on the
    message type.

Checked against ``k8s.io/dynamic-resource-allocation/cel`` v0.36.6 (the Kubernetes 1.36
line, consumable capacity on, list-type attributes off) by evaluating every expression of
``tests/fitcore/test_cel.py`` on both for the same devices: results agree, except for the
known gaps below (pinned by the ``test_gap_*`` tests):

- Cost: Kubernetes' ``CELSelectorExpressionMaxCost`` (1,000,000) is enforced on the
  *estimated* worst-case cost at compile time (``fitcore.celcost``, cel-go's model with the
  Kubernetes libraries' costs and the DRA size bounds; its docstring lists where it is
  more lenient than Kubernetes). The API server's *runtime* cost check (the actual cost of
  one evaluation) is not: the C++ binding has no cost tracking. In its place the C++
  runtime stops an evaluation after about 10,000 comprehension iterations, a budget the
  binding does not let us change (its environment config has no limits), so a selector
  that Kubernetes evaluates with more iterations (e.g. four nested ``all`` over 12-element
  lists, well under the cost limit) fails here with a runtime CelError that says so.
  Expressions are capped at 10 KiB at compile time as in Kubernetes.
- ``device`` alone (``cel.bind(d, device, ...)``) is not a value; only its fields are.
- Message artefacts: ``q.exact`` or ``v.major`` without parentheses read the message
  fields where Kubernetes reports a compile error.
- ``isInteger``/``asInteger`` are mathematical: true for any whole value in int64.
  Kubernetes' answer depends on the internal representation (``quantity("1000m")``
  and ``quantity("1.5Gi")`` report false there).
- A domain we add as an empty map becomes visible to ``in``, ``size()`` and
  comprehensions over ``device.attributes`` in the re-evaluation. ``has()`` and
  optional indexing (``has(device.attributes.d)``, ``device.attributes[?"d"]``) see a
  missing domain as absent; Kubernetes' default-valued map reports every domain present.
- Invalid regex literals (``"x".matches("[")``) are compile errors in Kubernetes and
  runtime errors here; so are list functions on lists of a statically non-comparable
  type (``[quantity("1")].isSorted()``).
- The list-type attributes of KEP-5491 (alpha, off by default in 1.36) and their
  ``includes`` function are not modelled.
- ``find``/``findAll`` use RE2 (the ``google-re2`` binding), as Kubernetes does through
  Go's regexp: linear-time matching, the same syntax, Go's rule for empty matches in
  ``findAll``. ``matches`` is cel-cpp's own RE2.
- Not provided (unused by DRA selectors in practice): the IP, CIDR, URL, image,
  authz, format-validation and sets libraries, two-variable comprehensions,
  quantity ``mul``/``div``/``divInt``, and the lists library's ``indexOf`` and
  ``lastIndexOf`` on lists (the binding refuses a second declaration of the strings
  extension's ``indexOf``).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, Final, Literal

import re2
from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from fitcore import celcost, values

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "CelError",
    "DeviceInput",
    "Selector",
    "compile_selector",
    "device_input",
]

MAX_EXPRESSION_LENGTH: Final = 10 * 1024
"""Kubernetes' ``CELSelectorExpressionMaxLength``, in bytes."""

MAX_COST: Final = 1_000_000
"""Kubernetes' ``CELSelectorExpressionMaxCost``, enforced on the estimate (`fitcore.celcost`)."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_COMPILED_CACHE_SIZE: Final = 4096


class CelError(ValueError):
    """A selector that does not compile, or whose evaluation fails for a device."""

    expression: str
    message: str
    kind: Literal["compile", "runtime"]

    def __init__(self, expression: str, message: str, kind: Literal["compile", "runtime"]):
        self.expression = expression
        self.message = message
        self.kind = kind
        super().__init__(f"CEL selector {_quote(expression)}: {message}")

    def __reduce__(self) -> tuple[type[CelError], tuple[str, str, str]]:
        return (type(self), (self.expression, self.message, self.kind))


def _quote(expression: str) -> str:
    if len(expression) > 200:
        expression = expression[:200] + "…"
    if '"' not in expression:
        return f'"{expression}"'
    if "'" not in expression:
        return f"'{expression}'"
    return '"' + expression.replace('"', '\\"') + '"'


# -- the Semver and Quantity message types ---------------------------------------------


def _message_types() -> tuple[Any, Any, Any]:
    """Build ``kubernetes.Quantity`` and ``kubernetes.Semver`` in a private pool."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="fitcore/cel_values.proto", package="kubernetes", syntax="proto3")
    quantity = file.message_type.add(name="Quantity")
    quantity.field.add(name="exact", number=1, type=field.TYPE_STRING,
                       label=field.LABEL_OPTIONAL)
    semver = file.message_type.add(name="Semver")
    for number, name in enumerate(("major", "minor", "patch"), start=1):
        semver.field.add(name=name, number=number, type=field.TYPE_UINT64,
                         label=field.LABEL_OPTIONAL)
    semver.field.add(name="prerelease", number=4, type=field.TYPE_STRING,
                     label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (pool,
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Semver")))


_POOL, _QuantityMessage, _SemverMessage = _message_types()
_QUANTITY_TYPE: Final = "kubernetes.Quantity"
_SEMVER_TYPE: Final = "kubernetes.Semver"


def _type_name(value: Any) -> str:
    descriptor = getattr(value, "DESCRIPTOR", None)
    if descriptor is not None:
        return str(descriptor.full_name)
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "double", str: "string", bytes: "bytes", list: "list",
            dict: "map", type(None): "null_type"}.get(type(value), type(value).__name__)


class _EvalError(Exception):
    """Raised by our CEL functions; the runtime turns it into a CEL error value."""


def _quantity_message(quantity: values.Quantity) -> Any:
    return _fraction_message(quantity.value)


# A Quantity message's `exact` is its value in lowest terms, numerator and denominator in
# hexadecimal: canonical (so CEL's `==` is semantic equality), and linear to write and
# read whatever the size. Decimal would refuse values past 4,300 digits (Python's limit
# on int/str conversion), and Kubernetes accepts quantities such as "1e10000".
@functools.lru_cache(maxsize=8192)
def _exact(text: str) -> Fraction:
    numerator, _, denominator = text.partition("/")
    return Fraction(int(numerator, 16), int(denominator, 16))


def _as_fraction(message: Any) -> Fraction:
    if _type_name(message) != _QUANTITY_TYPE:
        raise _EvalError(f"no such overload: expected a quantity, got {_type_name(message)}")
    return _exact(message.exact)


def _fraction_message(value: Fraction) -> Any:
    return _QuantityMessage(exact=f"{value.numerator:x}/{value.denominator:x}")


def _semver_message(version: values.Version) -> Any:
    return _SemverMessage(major=version.major, minor=version.minor, patch=version.patch,
                          prerelease=".".join(version.prerelease))


@functools.lru_cache(maxsize=8192)
def _semver_key(major: int, minor: int, patch: int, prerelease: str) -> tuple[Any, ...]:
    text = f"{major}.{minor}.{patch}" + (f"-{prerelease}" if prerelease else "")
    return values.Version.parse(text).precedence_key


def _precedence(message: Any) -> tuple[Any, ...]:
    return _semver_key(message.major, message.minor, message.patch, message.prerelease)


@functools.lru_cache(maxsize=1024)
def _parse_quantity(text: str) -> values.Quantity:
    return values.Quantity.parse(text)


# -- function implementations ----------------------------------------------------------


def _cel_quantity(text: str) -> Any:
    try:
        return _quantity_message(_parse_quantity(text))
    except ValueError as exc:
        raise _EvalError(str(exc)) from None


def _cel_is_quantity(text: str) -> bool:
    try:
        _parse_quantity(text)
    except ValueError:
        return False
    return True


def _cel_semver(text: str, normalize: bool = False) -> Any:
    try:
        return _semver_message(values.Version.parse(text, normalize=normalize))
    except ValueError as exc:
        raise _EvalError(str(exc)) from None


def _cel_is_semver(text: str, normalize: bool = False) -> bool:
    try:
        values.Version.parse(text, normalize=normalize)
    except ValueError:
        return False
    return True


def _compare(left: Any, right: Any) -> int:
    """compareTo for two quantities or two semvers (one runtime overload serves both)."""
    kinds = (_type_name(left), _type_name(right))
    if kinds == (_QUANTITY_TYPE, _QUANTITY_TYPE):
        a, b = _as_fraction(left), _as_fraction(right)
        return (a > b) - (a < b)
    if kinds == (_SEMVER_TYPE, _SEMVER_TYPE):
        x, y = _precedence(left), _precedence(right)
        return (x > y) - (x < y)
    raise _EvalError(f"no such overload: {kinds[0]}.compareTo({kinds[1]})")


def _int64(value: int, what: str) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _EvalError(f"{what} overflows int")
    return value


def _semver_part(name: str) -> Callable[[Any], int]:
    def part(message: Any) -> int:
        return _int64(int(getattr(message, name)), f"semver {name} version")
    return part


def _quantity_plus(sign: int) -> Callable[[Any, Any], Any]:
    def plus(left: Any, right: Any) -> Any:
        other = Fraction(right) if isinstance(right, int) else _as_fraction(right)
        return _fraction_message(_as_fraction(left) + sign * other)
    return plus


def _quantity_sign(message: Any) -> int:
    value = _as_fraction(message)
    return (value > 0) - (value < 0)


def _quantity_is_integer(message: Any) -> bool:
    value = _as_fraction(message)
    return value.denominator == 1 and _INT64_MIN <= value <= _INT64_MAX


def _quantity_as_integer(message: Any) -> int:
    if not _quantity_is_integer(message):
        raise _EvalError("cannot convert value to integer")
    return int(_as_fraction(message))


def _quantity_as_float(message: Any) -> float:
    value = _as_fraction(message)
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


# RE2, as Kubernetes' CEL library uses (Go's regexp): matching time is linear in the
# input, so no pattern a tenant writes into a selector can run for hours, as a
# backtracking engine does on ``"aaaa…!".find("^(a+)+$")``.
_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is raised to the caller, not printed


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re2._Regexp:
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise _EvalError(f"invalid regular expression {pattern!r}: {detail}") from None


def _find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """Successive non-overlapping matches, as Go's ``FindAllString``: an empty match
    right where the previous match ended is skipped (``"baaa".findAll("a*")`` is
    ``["", "aaa"]``, where Python's ``finditer`` adds a third, empty match)."""
    if limit == 0:
        return []
    found: list[str] = []
    previous_end = -1
    for match in _regex(pattern).finditer(text):
        start, end = match.span()
        if start == end == previous_end:
            continue
        found.append(match.group(0))
        previous_end = end
        if len(found) == limit:
            break
    return found


# The lists library orders like CEL: numbers across int/uint/double, and no ordering
# between different kinds.


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return _type_name(value)


def _check_comparable(items: list[Any], function: str) -> None:
    kinds = {_kind(item) for item in items}
    if len(kinds) > 1 or not kinds <= {"bool", "number", "string", "bytes"}:
        raise _EvalError(f"no such overload: {function} needs a list of one comparable type")


def _is_sorted(items: list[Any]) -> bool:
    _check_comparable(items, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(items))


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    if {_kind(item) for item in items} != {"number"}:
        raise _EvalError("no such overload: sum needs a list of numbers")
    total = sum(items)
    if isinstance(total, int):
        _int64(total, "sum")
    return total


def _extreme(function: str, pick: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    def extreme(items: list[Any]) -> Any:
        if not items:
            raise _EvalError(f"{function} called on empty list")
        _check_comparable(items, function)
        return pick(items)
    return extreme


# -- the environment -------------------------------------------------------------------


def _overload(overload_id: str, result: Any, params: list[Any], impl: Any = None,
              member: bool = False) -> Any:
    if impl is None:  # shares the runtime implementation of an earlier overload
        return _cel.Overload(overload_id, result, params, is_member=member)
    return _cel.Overload(overload_id, result, params, is_member=member, impl=impl)


def _functions() -> list[Any]:
    t = _cel.Type
    quantity, semver = t(_QUANTITY_TYPE), t(_SEMVER_TYPE)
    dyn_list = t.List(t.DYN)

    def comparison(test: Callable[[int], bool]) -> Callable[[Any, Any], bool]:
        return lambda left, right: test(_compare(left, right))

    def fn(name: str, *overloads: Any) -> Any:
        return _cel.FunctionDecl(name, list(overloads))

    return [
        fn("quantity", _overload("string_to_quantity", quantity, [t.STRING], _cel_quantity)),
        fn("isQuantity", _overload("is_quantity_string", t.BOOL, [t.STRING], _cel_is_quantity)),
        # Kubernetes declares sign as a global function only: sign(q), not q.sign().
        fn("sign", _overload("quantity_sign", t.INT, [quantity], _quantity_sign)),
        fn("isInteger", _overload("quantity_is_integer", t.BOOL, [quantity],
                                  _quantity_is_integer, member=True)),
        fn("asInteger", _overload("quantity_get_int", t.INT, [quantity],
                                  _quantity_as_integer, member=True)),
        fn("asApproximateFloat", _overload("quantity_get_float", t.DOUBLE, [quantity],
                                           _quantity_as_float, member=True)),
        fn("add",
           _overload("quantity_add", quantity, [quantity, quantity], _quantity_plus(1), True),
           _overload("quantity_add_int", quantity, [quantity, t.INT], _quantity_plus(1), True)),
        fn("sub",
           _overload("quantity_sub", quantity, [quantity, quantity], _quantity_plus(-1), True),
           _overload("quantity_sub_int", quantity, [quantity, t.INT], _quantity_plus(-1), True)),
        fn("semver",
           _overload("string_to_semver", semver, [t.STRING], _cel_semver),
           _overload("string_bool_to_semver", semver, [t.STRING, t.BOOL], _cel_semver)),
        fn("isSemver",
           _overload("is_semver_string", t.BOOL, [t.STRING], _cel_is_semver),
           _overload("is_semver_string_bool", t.BOOL, [t.STRING, t.BOOL], _cel_is_semver)),
        fn("major", _overload("semver_major", t.INT, [semver], _semver_part("major"), True)),
        fn("minor", _overload("semver_minor", t.INT, [semver], _semver_part("minor"), True)),
        fn("patch", _overload("semver_patch", t.INT, [semver], _semver_part("patch"), True)),
        fn("isGreaterThan",
           _overload("quantity_is_greater_than", t.BOOL, [quantity, quantity],
                     comparison(lambda c: c > 0), True),
           _overload("semver_is_greater_than", t.BOOL, [semver, semver], member=True)),
        fn("isLessThan",
           _overload("quantity_is_less_than", t.BOOL, [quantity, quantity],
                     comparison(lambda c: c < 0), True),
           _overload("semver_is_less_than", t.BOOL, [semver, semver], member=True)),
        fn("compareTo",
           _overload("quantity_compare_to", t.INT, [quantity, quantity], _compare, True),
           _overload("semver_compare_to", t.INT, [semver, semver], member=True)),
        fn("find", _overload("string_find_string", t.STRING, [t.STRING, t.STRING], _find, True)),
        fn("findAll",
           _overload("string_find_all_string", t.List(t.STRING), [t.STRING, t.STRING],
                     _find_all, True),
           _overload("string_find_all_string_int", t.List(t.STRING),
                     [t.STRING, t.STRING, t.INT], _find_all, True)),
        fn("isSorted", _overload("list_is_sorted", t.BOOL, [dyn_list], _is_sorted, True)),
        fn("sum", _overload("list_sum", t.DYN, [dyn_list], _sum, True)),
        fn("min", _overload("list_min", t.DYN, [dyn_list], _extreme("min", min), True)),
        fn("max", _overload("list_max", t.DYN, [dyn_list], _extreme("max", max), True)),
    ]


_DRIVER = "device.driver"
_ATTRIBUTES = "device.attributes"
_CAPACITY = "device.capacity"
_ALLOW_MULTIPLE = "device.allowMultipleAllocations"
_QUALIFIED: Final = frozenset({_DRIVER, _ATTRIBUTES, _CAPACITY, _ALLOW_MULTIPLE})


@functools.cache
def _environment() -> Any:
    t = _cel.Type
    return _cel.NewEnv(
        _POOL,
        variables={
            _DRIVER: t.STRING,
            _ATTRIBUTES: t.Map(t.STRING, t.Map(t.STRING, t.DYN)),
            _CAPACITY: t.Map(t.STRING, t.Map(t.STRING, t(_QUANTITY_TYPE))),
            _ALLOW_MULTIPLE: t.BOOL,
        },
        extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(version=2),
                    ext_optional.ExtOptional()],
        functions=_functions(),
    )


# -- devices ---------------------------------------------------------------------------

AttributeValue = int | bool | str | values.Version


class DeviceInput:
    """One device as the ``device`` variable, built once and reused by every selector.

    Opaque to callers: build it with `device_input`.
    """

    __slots__ = ("_activations", "_attributes", "_capacity", "_data", "driver")

    def __init__(self, driver: str, attributes: dict[str, dict[str, Any]],
                 capacity: dict[str, dict[str, Any]], allow_multiple_allocations: bool):
        self.driver = driver
        self._attributes = attributes
        self._capacity = capacity
        self._data = {_DRIVER: driver, _ATTRIBUTES: attributes, _CAPACITY: capacity,
                      _ALLOW_MULTIPLE: allow_multiple_allocations}
        # Activations by the set of domains added as empty maps (see _missing_domain).
        self._activations: dict[frozenset[str], Any] = {}

    def _activation(self, added: frozenset[str] = frozenset()) -> Any:
        activation = self._activations.get(added)
        if activation is None:
            data = self._data
            if added:
                data = dict(data)
                data[_ATTRIBUTES] = {**{d: {} for d in added}, **self._attributes}
                data[_CAPACITY] = {**{d: {} for d in added}, **self._capacity}
            activation = self._activations[added] = _environment().Activation(data)
        return activation

    def __repr__(self) -> str:
        return f"DeviceInput(driver={self.driver!r}, attributes={self._attributes!r})"


def _split_name(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute_value(name: str, value: AttributeValue) -> Any:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"attribute {name}: {value} does not fit in int64")
        return value
    if isinstance(value, values.Version):
        return _semver_message(value)
    raise TypeError(f"attribute {name}: unsupported value {value!r}")


def device_input(driver: str, attributes: Mapping[str, AttributeValue],
                 capacity: Mapping[str, values.Quantity],
                 allow_multiple_allocations: bool) -> DeviceInput:
    """Build the ``device`` variable for one device, to evaluate any number of selectors.

    Attribute and capacity names are as in the ResourceSlice: ``domain/id`` or a bare
    ``id`` in the driver's domain. Raises TypeError/ValueError for values a
    ResourceSlice cannot hold.
    """
    grouped_attributes: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        domain, ident = _split_name(name, driver)
        grouped_attributes.setdefault(domain, {})[ident] = _attribute_value(name, value)
    grouped_capacity: dict[str, dict[str, Any]] = {}
    for name, quantity in capacity.items():
        if not isinstance(quantity, values.Quantity):
            raise TypeError(f"capacity {name}: expected a Quantity, got {quantity!r}")
        domain, ident = _split_name(name, driver)
        grouped_capacity.setdefault(domain, {})[ident] = _quantity_message(quantity)
    return DeviceInput(driver, grouped_attributes, grouped_capacity,
                       bool(allow_multiple_allocations))


# -- selectors -------------------------------------------------------------------------

_STATUS_PREFIX: Final = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX: Final = re.compile(r"\s*\[[A-Z_]+\]$")
_MISSING_KEY: Final = re.compile(r'Key not found in map : "((?:[^"\\]|\\.)*)"$')
_NO_OVERLOAD: Final = re.compile(r"No matching overloads found : (.*)$")
_MAX_ADDED_DOMAINS: Final = 64


def _readable(status: str) -> str:
    """A C++ CEL status text, without its status code, in Kubernetes' words."""
    text = _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", status.strip()))
    if match := _MISSING_KEY.search(text):
        return f"no such key: {_unescape(match.group(1))}"
    if match := _NO_OVERLOAD.search(text):
        return f"no such overload: {match.group(1)}"
    return text.replace("ERROR: <input>:", "at ")


def _type_label(cel_type: Any) -> str:
    name = str(cel_type.name())
    return name.lower() if name.isupper() else name


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted)


class Selector:
    """A compiled selector; `matches` evaluates it for one device."""

    __slots__ = ("_program", "expression")

    def __init__(self, expression: str, program: Any):
        self.expression = expression
        self._program = program

    def matches(self, device: DeviceInput) -> bool:
        """True if the selector accepts `device`; CelError(kind="runtime") if it fails."""
        added: frozenset[str] = frozenset()
        while True:
            try:
                result = self._program.eval(device._activation(added))
            except RuntimeError as exc:  # e.g. cel-cpp's comprehension iteration budget
                raise CelError(self.expression, _runtime_failure(str(exc)), "runtime") from None
            kind = result.type()
            if kind == _cel.Type.BOOL:
                return bool(result.value())
            if kind != _cel.Type.ERROR:
                raise CelError(self.expression,
                               f"must evaluate to bool, got {_type_label(kind)}", "runtime")
            status = str(result.value())
            domain = _missing_domain(status, device, added)
            if domain is None:
                raise CelError(self.expression, _readable(status), "runtime")
            added |= {domain}

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


_ITERATION_BUDGET: Final = "Iteration budget exceeded"


def _runtime_failure(status: str) -> str:
    """The message for an evaluation the C++ runtime aborted instead of returning an error."""
    text = _readable(status)
    if _ITERATION_BUDGET in text:
        return ("evaluation exceeds the CEL runtime's comprehension iteration budget "
                "(about 10,000 iterations in one evaluation; Kubernetes has no such budget, "
                "only the compile-time cost limit)")
    return "evaluation failed: " + text


def _missing_domain(status: str, device: DeviceInput, added: frozenset[str]) -> str | None:
    """The domain to add as an empty map if `status` is a lookup the device lacks.

    Kubernetes answers ``device.attributes[d]`` and ``device.capacity[d]`` with an empty
    map for any domain the device has none of. The error cannot tell which map failed,
    so a key missing from either outer map is added to both and evaluation repeats; if
    the key was an attribute id instead, the repeat fails the same way and we stop.
    """
    match = _MISSING_KEY.search(status)
    if match is None or len(added) >= _MAX_ADDED_DOMAINS:
        return None
    key = _unescape(match.group(1))
    if key in added or (key in device._attributes and key in device._capacity):
        return None
    return key


@functools.lru_cache(maxsize=_COMPILED_CACHE_SIZE)
def _compile(expression: str) -> Selector | CelError:
    size = len(expression.encode())
    if size > MAX_EXPRESSION_LENGTH:
        return CelError(expression, f"expression is {size} bytes long, the limit is "
                        f"{MAX_EXPRESSION_LENGTH}", "compile")
    environment = _environment()
    try:
        program = environment.compile(expression)
    except RuntimeError as exc:
        return CelError(expression, "compilation failed: " + _readable(str(exc)), "compile")
    result = program.return_type()
    if result != _cel.Type.BOOL and result != _cel.Type.DYN:
        return CelError(expression, f"must evaluate to bool, not {_type_label(result)}",
                        "compile")
    try:
        cost = celcost.estimate_max_cost(program.serialize(), _QUALIFIED)
    except ValueError as exc:  # not expected: the binding always returns a CheckedExpr
        return CelError(expression, f"cost estimation failed: {exc}", "compile")
    if cost > MAX_COST:
        return CelError(expression, f"too complex, exceeds cost limit: estimated worst-case "
                        f"cost {cost} exceeds the limit of {MAX_COST} (Kubernetes' "
                        "CELSelectorExpressionMaxCost)", "compile")
    return Selector(expression, program)


def compile_selector(expression: str) -> Selector:
    """Compile a selector (cached by expression); CelError(kind="compile") if invalid."""
    compiled = _compile(expression)
    if isinstance(compiled, CelError):
        raise CelError(compiled.expression, compiled.message, compiled.kind)
    return compiled


def evaluate(expression: str, devices: Iterable[DeviceInput]) -> list[bool]:
    """Evaluate one selector for several devices (a convenience for tests and tools)."""
    selector = compile_selector(expression)
    return [selector.matches(device) for device in devices]
