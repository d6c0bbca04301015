"""YAML 1.1 scalars as Kubernetes reads them.

`kubectl` and the API server read YAML through sigs.k8s.io/yaml, over go-yaml v2: YAML
1.1, into untyped values, then JSON. What a *plain* (unquoted, untagged) scalar becomes
there, and so here (`resolve`):

- booleans: `y Y yes Yes YES on On ON true True TRUE` and `n N no No NO off Off OFF false
  False FALSE` (PyYAML leaves `y` and `n` strings; go-yaml does not);
- null: the empty scalar, `~ null Null NULL`;
- floats: `.inf .Inf .INF` (signed too), `.nan .NaN .NAN`, and decimal forms with a dot
  or an exponent (`1.5`, `1e3`, `.5`; `08` too, which is no octal integer);
- integers as Go's `strconv.ParseInt(s, 0, 64)` reads them once underscores are dropped:
  decimal, `0x1F`, `0o17`, `0b101` and the YAML 1.1 octal `0777`; beyond int64, up to
  uint64; beyond that a float when it is decimal;
- everything else a string, timestamps included: go-yaml v2 hands a timestamp to an
  untyped value as its text (`2001-12-14` stays `"2001-12-14"`; PyYAML makes a date),
  and `1:30` is no sexagesimal number (PyYAML makes 90).

Mapping keys end as JSON object keys (`key`): a boolean key becomes `"true"`/`"false"`,
an integer key its decimal text, as sigs.k8s.io/yaml converts them; a null, float or
container key is refused.

Both YAML readers (`fitcore._yamlread`, the compiled one, and the PyYAML one in
`fitcore.read`) call these, once per distinct plain text.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: go-yaml's table of plain scalars with a fixed meaning.
WORDS: dict[str, Any] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On",
                     "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off",
                     "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}

# go-yaml's yamlStyleFloat, and the decimal floats Go's ParseFloat takes after a dot.
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?\Z")
_DIGITS = {16: frozenset("0123456789abcdefABCDEF"), 10: frozenset("0123456789"),
           8: frozenset("01234567"), 2: frozenset("01")}
_PREFIX = {"x": 16, "X": 16, "o": 8, "O": 8, "b": 2, "B": 2}
_INT64 = 2**63
_UINT64 = 2**64


def resolve(text: str) -> Any:
    """The value of a plain scalar of this text, as go-yaml v2 reads it."""
    if text in WORDS:
        return WORDS[text]
    first = text[0]
    if first == ".":
        return _float(text) if _DOT_FLOAT.match(text) else text
    if first not in "+-0123456789":
        return text
    plain = text.replace("_", "")
    number = _go_int(plain)
    if number is not None:
        return number
    if _FLOAT.match(plain):
        return _float(plain, text)
    return text


def _float(digits: str, text: str | None = None) -> Any:
    """Go's ParseFloat refuses what overflows (go-yaml then keeps the text)."""
    value = float(digits)
    return (text if text is not None else digits) if math.isinf(value) else value


def _go_int(plain: str) -> int | None:
    """strconv.ParseInt(plain, 0, 64), else ParseUint(plain, 0, 64); None if neither."""
    signed = plain[:1] in ("+", "-")
    body = plain[1:] if signed else plain
    base, digits = 10, body
    if len(body) > 1 and body[0] == "0":
        base = _PREFIX.get(body[1], 8)
        digits = body[2:] if body[1] in _PREFIX else body[1:]
    if not digits or len(digits) > 64 or not set(digits) <= _DIGITS[base]:
        return None  # (more than 64 digits is beyond uint64 in any base)
    value = int(digits, base)
    if plain[:1] == "-":
        value = -value
    if -_INT64 <= value < _INT64 or (not signed and 0 <= value < _UINT64):
        return value
    return None


class BadKey(ValueError):
    """A mapping key that is no JSON object key (null, a float, a mapping, a list)."""


def key(value: Any) -> str:
    """A mapping key as sigs.k8s.io/yaml hands it on: JSON object keys are strings."""
    if isinstance(value, str):
        return value
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise BadKey(f"a mapping key must be a string, not {_what(value)}")


def _what(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list", float: f"the number {value!r}"}.get(
        type(value), type(value).__name__)


_TAG = "tag:yaml.org,2002:"
_KINDS = {bool: "bool", type(None): "null", int: "int", float: "float", str: "str"}


def tagged(tag: str, text: str) -> Any:
    """The value of a scalar with an explicit tag, as go-yaml v2 reads it: `!!str`
    (and `!`, `!!timestamp`) keep the text; `!!int`, `!!float`, `!!bool`, `!!null` resolve
    it and refuse what is not of that kind (an integer is a float's too); any other tag
    (`!custom`) leaves the text, as go-yaml does. ValueError for what is refused."""
    if not tag.startswith(_TAG):
        return text
    kind = tag[len(_TAG):]
    if kind in ("str", "timestamp"):
        return text
    if kind not in ("int", "float", "bool", "null"):
        raise ValueError(f"a scalar tagged !!{kind} is not read")
    value = resolve(text)
    got = _KINDS[type(value)]
    if got == kind:
        return value
    if kind == "float" and got == "int":
        return float(value)
    raise ValueError(f"cannot read !!{got} {text!r} as !!{kind}")
