"""Kubernetes value types, exact: resource quantities and semantic versions.

`Quantity` is Kubernetes' ``resource.Quantity`` as the scheduler sees it: a fixed-point
number, never a float. We keep the value as a `fractions.Fraction` and remember the
*format* the text was written in (decimal SI, binary SI or decimal exponent), because
Kubernetes prints a quantity in the format it was parsed from. Parsing follows
apimachinery's ``ParseQuantity`` rather than the documented grammar alone:

- the scanner accepts ``[+-]? digits? (. digits?)? suffix-letters [+-]? digits?``, so
  ``"1."``, ``".5"``, ``"."`` and even a bare sign are valid (the last two mean 0);
- the suffix must then be one of ``n u m "" k M G T P E`` (powers of 1000),
  ``Ki Mi Gi Ti Pi Ei`` (powers of 1024) or ``e``/``E`` followed by a signed integer;
- a value more precise than 1n (10^-9) is rounded *up* in magnitude to the next
  nano, so no quantity ever has a finer resolution than that;
- a binary-SI value larger than 2^63-1 in magnitude is capped there (decimal values
  are not capped), and a binary-SI value between -1 and 1 switches to decimal SI.

Equality, ordering and hashing use the numeric value only: ``1`` equals ``1000m``.
`str` gives the canonical Kubernetes form (``1.5`` → ``"1500m"``, ``1.5Gi`` →
``"1536Mi"``) and always parses back to an equal quantity.

`Version` is a DRA ``version`` attribute: strict Semantic Versioning 2.0.0, with each
numeric part limited to 64 bits as in the Go library the scheduler uses. Ordering is
semver precedence (pre-releases before the release, build metadata ignored), but
``==`` and ``hash`` compare the exact text: the allocator's ``matchAttribute``
constraint compares version attributes as strings, so ``1.0.0+a`` and ``1.0.0+b``
are different values that nonetheless have equal precedence (`Version.compare`
returns 0 for them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Final, Literal, TypeAlias

__all__ = ["Quantity", "QuantityFormat", "Version"]

QuantityFormat: TypeAlias = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

# The scanner of apimachinery's parseQuantityString, as one regular expression. The
# message quotes the pattern Kubernetes prints for the same failure.
_QUANTITY_SCAN: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)"
)
_FORMAT_WRONG: Final = (
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}
_DECIMAL_SUFFIX_OF: Final[dict[int, str]] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60,
}
_BINARY_SUFFIX_OF: Final[tuple[str, ...]] = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_NANO: Final = Fraction(1, 10**9)
_BINARY_MAX: Final = 2**63 - 1
# Kubernetes keeps decimal exponents in an int32. Past 10^4 we refuse instead of
# materialising the number: no real capacity or request is that large.
_MAX_POSITIVE_EXPONENT: Final = 10_000
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _round_up_to_nano(value: Fraction) -> Fraction:
    """Round the magnitude of `value` up to a multiple of 10^-9 (Kubernetes' RoundUp)."""
    if (value * 10**9).denominator == 1:
        return value
    nanos = math.ceil(abs(value) * 10**9)
    return Fraction(nanos if value > 0 else -nanos, 10**9)


#: Parsed quantities and versions by text (both are immutable, so parsing one text once
#: serves every object that writes it: a cluster's slices repeat "80Gi" thousands of times).
_PARSED: dict[str, Quantity] = {}
_VERSIONS: dict[str, Version] = {}
_PARSED_LIMIT = 1 << 16


class Quantity:
    """An exact Kubernetes resource quantity (``resource.Quantity``).

    Construct one with `Quantity.parse` from its text (``"40Gi"``, ``"1500m"``) or from
    an int; ``Quantity(value)`` takes an int or a `Fraction` that is a whole number of
    nanos. Instances are immutable and hashable; comparisons and arithmetic are exact.
    """

    __slots__ = ("_format", "_hash", "_value")

    _value: Fraction
    _format: QuantityFormat
    _hash: int | None  # the value's hash, once asked (a Fraction's hash costs a pow)

    def __init__(self, value: int | Fraction, format: QuantityFormat = "DecimalSI") -> None:
        if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
            raise TypeError(f"a quantity is built from an int or a Fraction, not {value!r}")
        exact = Fraction(value)
        if (exact * 10**9).denominator != 1:
            raise ValueError(
                f"{value} is not a whole number of nanos; Kubernetes quantities have at most "
                "9 decimal places"
            )
        object.__setattr__(self, "_value", exact)
        object.__setattr__(self, "_format", format)
        object.__setattr__(self, "_hash", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    # -- parsing -------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str | int) -> Quantity:
        """Parse Kubernetes quantity syntax (or take an int); raise ValueError if invalid.

        Follows apimachinery's ``ParseQuantity``: values finer than 1n are rounded up in
        magnitude, binary-SI values are capped at 2^63-1.
        """
        if type(text) is str and cls is Quantity:
            found = _PARSED.get(text)
            if found is None:
                found = cls._parse(text)
                if len(_PARSED) >= _PARSED_LIMIT:
                    _PARSED.clear()
                _PARSED[text] = found
            return found
        return cls._parse(text)

    @classmethod
    def _parse(cls, text: str | int) -> Quantity:
        if isinstance(text, bool):
            raise TypeError(f"a quantity is parsed from a string or an int, not {text!r}")
        if isinstance(text, int):
            return cls(text)
        if not isinstance(text, str):
            raise TypeError(f"a quantity is parsed from a string or an int, not {text!r}")
        if not text:
            raise ValueError(f"invalid quantity {text!r}: {_FORMAT_WRONG}")
        match = _QUANTITY_SCAN.fullmatch(text)
        if match is None:
            raise ValueError(f"invalid quantity {text!r}: {_FORMAT_WRONG}")
        sign, int_part, frac_part, suffix = match.group("sign", "int", "frac", "suffix")
        frac_part = frac_part or ""
        digits = int((int_part + frac_part) or "0")
        format, base, exponent = _interpret_suffix(text, suffix)
        if base == 10:
            shift = exponent - len(frac_part)
            if shift > _MAX_POSITIVE_EXPONENT:
                raise ValueError(f"invalid quantity {text!r}: exponent too large")
            if digits and shift + len(str(digits)) <= -9:
                # Below one nano however far the exponent goes: rounds up to 1n.
                magnitude = _NANO
            else:
                magnitude = Fraction(digits) * Fraction(10) ** shift
        else:
            magnitude = Fraction(digits, 10 ** len(frac_part)) * 2**exponent
        magnitude = _round_up_to_nano(magnitude)
        if format == "BinarySI":
            magnitude = min(magnitude, Fraction(_BINARY_MAX))
            if 0 < magnitude < 1:
                format = "DecimalSI"
        return cls(-magnitude if sign == "-" else magnitude, format)

    # -- accessors -----------------------------------------------------------------

    @property
    def value(self) -> Fraction:
        """The exact numeric value."""
        return self._value

    @property
    def format(self) -> QuantityFormat:
        """The format the quantity was written in; `str` prints it in that format."""
        return self._format

    def is_integer(self) -> bool:
        """True if the value is a whole number."""
        return self._value.denominator == 1

    def ceil_int(self) -> int:
        """The smallest int not below the value (what ``Value()`` rounds fractions to)."""
        return math.ceil(self._value)

    def milli_value(self) -> int:
        """ceil(value * 1000), Kubernetes' ``MilliValue`` (cpu is counted in millis)."""
        return math.ceil(self._value * 1000)

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._value > 0) - (self._value < 0)

    # -- rounding helpers for consumable capacity ----------------------------------

    def round_up_to_step(self, start: Quantity, step: Quantity) -> Quantity:
        """The smallest ``start + k*step`` (k >= 0 whole) that is at least this value, as
        the DRA allocator rounds a request under a ``requestPolicy.validRange``: each of
        the three is first rounded up to a whole number (so 150m from 100m in steps of
        100m is 1). A request below ``start`` becomes ``start``. The one rounding rule:
        `fitcore.semantics` uses it for consumable capacity.
        """
        if step._value <= 0:
            raise ValueError(f"step must be positive, got {step}")
        if self._value < start._value:
            return start
        req, size, lo = math.ceil(self._value), math.ceil(step._value), math.ceil(start._value)
        return Quantity.parse(lo + size * -(-(req - lo) // size))

    def on_step(self, start: Quantity, step: Quantity) -> bool:
        """Whether this value is ``start`` plus a whole number of steps, by the same
        whole-number rule as `round_up_to_step`."""
        return (math.ceil(self._value) - math.ceil(start._value)) % math.ceil(step._value) == 0

    def round_up_to_one_of(self, valid_values: Iterable[Quantity]) -> Quantity | None:
        """The smallest of `valid_values` that is at least this value, or None."""
        candidates = [v for v in valid_values if v._value >= self._value]
        return min(candidates) if candidates else None

    # -- arithmetic and comparison -------------------------------------------------

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        format = other._format if self._value == 0 else self._format
        return Quantity(self._value + other._value, format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        format = other._format if self._value == 0 else self._format
        return Quantity(self._value - other._value, format)

    def __mul__(self, factor: int) -> Quantity:
        if isinstance(factor, bool) or not isinstance(factor, int):
            return NotImplemented
        return Quantity(self._value * factor, self._format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity(-self._value, self._format)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._value == other._value

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash(self._value)
            object.__setattr__(self, "_hash", found)
        return found

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._value < other._value

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._value <= other._value

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._value > other._value

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._value >= other._value

    def __bool__(self) -> bool:
        return self._value != 0

    # -- printing ------------------------------------------------------------------

    def __str__(self) -> str:
        """The canonical Kubernetes form: no fractional digits, the largest suffix."""
        value = self._value
        if value == 0:
            return "0"
        sign = "-" if value < 0 else ""
        magnitude = abs(value)
        format = self._format
        if format == "BinarySI" and (magnitude < 1024 or magnitude.denominator != 1):
            format = "DecimalSI"
        if format == "BinarySI":
            mantissa, power = int(magnitude), 0
            while mantissa % 1024 == 0 and power < len(_BINARY_SUFFIX_OF) - 1:
                mantissa //= 1024
                power += 1
            return f"{sign}{mantissa}{_BINARY_SUFFIX_OF[power]}"
        # Decimal: value = mantissa * 10^exponent, no factor of ten left in the mantissa,
        # then the exponent lowered to a multiple of three.
        mantissa, exponent = int(magnitude * 10**9), -9
        while mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        while exponent % 3:
            mantissa *= 10
            exponent -= 1
        if format == "DecimalExponent":
            return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
        if exponent > 18:  # beyond exa there is no SI suffix: write the zeros
            mantissa *= 10 ** (exponent - 18)
            exponent = 18
        return f"{sign}{mantissa}{_DECIMAL_SUFFIX_OF[exponent]}"

    def __repr__(self) -> str:
        return f"Quantity.parse({str(self)!r})"


def _interpret_suffix(text: str, suffix: str) -> tuple[QuantityFormat, int, int]:
    """(format, base, exponent) for a quantity suffix, as Kubernetes' suffixer reads it."""
    if suffix in _DECIMAL_SUFFIXES:
        return "DecimalSI", 10, _DECIMAL_SUFFIXES[suffix]
    if suffix in _BINARY_SUFFIXES:
        return "BinarySI", 2, _BINARY_SUFFIXES[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        try:
            exponent = int(suffix[1:], 10)
        except ValueError:
            exponent = None
        if exponent is not None and suffix[1:].lstrip("+-").isdigit():
            if not _INT32_MIN <= exponent <= _INT32_MAX:
                raise ValueError(f"invalid quantity {text!r}: exponent out of range")
            return "DecimalExponent", 10, exponent
    raise ValueError(f"invalid quantity {text!r}: unable to parse quantity's suffix")


# -- semantic versions -----------------------------------------------------------------

_NUMERIC: Final = r"0|[1-9][0-9]*"
_PRERELEASE_ID: Final = r"0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*"
_BUILD_ID: Final = r"[0-9A-Za-z-]+"
_SEMVER: Final = re.compile(
    rf"(?P<major>{_NUMERIC})\.(?P<minor>{_NUMERIC})\.(?P<patch>{_NUMERIC})"
    rf"(?:-(?P<pre>(?:{_PRERELEASE_ID})(?:\.(?:{_PRERELEASE_ID}))*))?"
    rf"(?:\+(?P<build>{_BUILD_ID}(?:\.{_BUILD_ID})*))?"
)
_UINT64_MAX: Final = 2**64 - 1

PrereleaseKey: TypeAlias = tuple[tuple[int, int | str], ...]


class Version:
    """A semantic version (semver.org 2.0.0), as DRA ``version`` attributes hold.

    ``<``, ``<=``, ``>``, ``>=`` and `compare` follow semver precedence; ``==`` and
    ``hash`` compare `text`, which is kept exactly as written (see the module docstring).
    """

    __slots__ = ("_key", "build", "major", "minor", "patch", "prerelease", "text")

    text: str
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]
    build: tuple[str, ...]
    _key: tuple[int, int, int, int, PrereleaseKey]

    def __init__(self, text: str) -> None:
        """Same as `Version.parse(text)`."""
        match = _SEMVER.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"invalid semantic version {text!r}: expected MAJOR.MINOR.PATCH "
                             "with optional -PRERELEASE and +BUILD (semver.org 2.0.0)")
        major, minor, patch = (int(match.group(g)) for g in ("major", "minor", "patch"))
        pre = tuple(match.group("pre").split(".")) if match.group("pre") else ()
        build = tuple(match.group("build").split(".")) if match.group("build") else ()
        numbers = [major, minor, patch, *(int(p) for p in pre if p.isdigit())]
        if any(n > _UINT64_MAX for n in numbers):
            raise ValueError(f"invalid semantic version {text!r}: "
                             "a numeric part does not fit in 64 bits")
        pre_key: PrereleaseKey = tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre)
        # A release (no pre-release) sorts after all of its pre-releases.
        key = (major, minor, patch, 0 if pre else 1, pre_key)
        for name, value in (("text", text), ("major", major), ("minor", minor),
                            ("patch", patch), ("prerelease", pre), ("build", build),
                            ("_key", key)):
            object.__setattr__(self, name, value)

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Version:
        """Parse a strict semantic version; raise ValueError if `text` is not one.

        With ``normalize=True`` first apply Kubernetes' CEL ``semver(s, true)``
        normalisation: drop one leading ``v``, pad ``1`` / ``1.2`` with ``.0`` and strip
        leading zeros from the major, minor and patch parts.
        """
        if normalize:
            return cls(_normalize_semver(text))
        found = _VERSIONS.get(text) if type(text) is str and cls is Version else None
        if found is None:
            found = cls(text)
            if type(text) is str and cls is Version:
                if len(_VERSIONS) >= _PARSED_LIMIT:
                    _VERSIONS.clear()
                _VERSIONS[text] = found
        return found

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Version is immutable")

    def compare(self, other: Version) -> int:
        """-1, 0 or 1 by semver precedence (build metadata ignored)."""
        return (self._key > other._key) - (self._key < other._key)

    @property
    def precedence_key(self) -> tuple[int, int, int, int, PrereleaseKey]:
        """A tuple whose ordering is semver precedence; equal for equal precedence."""
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __lt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key < other._key

    def __le__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key <= other._key

    def __gt__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key > other._key

    def __ge__(self, other: Version) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key >= other._key

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Version({self.text!r})"


def _normalize_semver(text: str) -> str:
    """Kubernetes' tolerant semver spelling turned strict (see `Version.parse`)."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or not stripped[0].isdigit():
                stripped = "0" + stripped
            parts[i] = stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError(f"invalid semantic version {text!r}: "
                             "a short version cannot carry pre-release or build metadata")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)
