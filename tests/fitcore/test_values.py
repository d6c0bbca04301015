"""Quantity and Version: parsing tables, canonical printing, ordering, rounding."""

import itertools
from fractions import Fraction

import pytest

from fitcore import values

Q = values.Quantity.parse
V = values.Version.parse

# (text, exact value, canonical str, format)
PARSE = [
    ("0", 0, "0", "DecimalSI"),
    ("1", 1, "1", "DecimalSI"),
    ("-1", -1, "-1", "DecimalSI"),
    ("+7", 7, "7", "DecimalSI"),
    ("1000", 1000, "1k", "DecimalSI"),
    ("1.5", Fraction(3, 2), "1500m", "DecimalSI"),
    ("100m", Fraction(1, 10), "100m", "DecimalSI"),
    ("250u", Fraction(1, 4000), "250u", "DecimalSI"),
    ("5n", Fraction(5, 10**9), "5n", "DecimalSI"),
    ("1k", 1000, "1k", "DecimalSI"),
    ("2M", 2 * 10**6, "2M", "DecimalSI"),
    ("0.2G", 2 * 10**8, "200M", "DecimalSI"),
    ("3T", 3 * 10**12, "3T", "DecimalSI"),
    ("4P", 4 * 10**15, "4P", "DecimalSI"),
    ("1E", 10**18, "1E", "DecimalSI"),
    ("1Ki", 1024, "1Ki", "BinarySI"),
    ("40Gi", 40 * 2**30, "40Gi", "BinarySI"),
    ("80Gi", 80 * 2**30, "80Gi", "BinarySI"),
    ("1.5Gi", 3 * 2**29, "1536Mi", "BinarySI"),
    ("0.5Ki", 512, "512", "BinarySI"),
    ("1Ti", 2**40, "1Ti", "BinarySI"),
    ("1Pi", 2**50, "1Pi", "BinarySI"),
    ("1Ei", 2**60, "1Ei", "BinarySI"),
    ("-1Ki", -1024, "-1Ki", "BinarySI"),
    ("1e3", 1000, "1e3", "DecimalExponent"),
    ("1E3", 1000, "1e3", "DecimalExponent"),
    ("12e6", 12 * 10**6, "12e6", "DecimalExponent"),
    ("1.5e3", 1500, "1500", "DecimalExponent"),
    ("1e+3", 1000, "1e3", "DecimalExponent"),
    ("1e-3", Fraction(1, 1000), "1e-3", "DecimalExponent"),
    ("1.", 1, "1", "DecimalSI"),
    (".5", Fraction(1, 2), "500m", "DecimalSI"),
    ("1.G", 10**9, "1G", "DecimalSI"),
    ("007", 7, "7", "DecimalSI"),
    # Kubernetes' scanner accepts an empty number: these are zero there too.
    (".", 0, "0", "DecimalSI"),
    ("+", 0, "0", "DecimalSI"),
    ("Mi", 0, "0", "BinarySI"),
    # Finer than a nano: the magnitude rounds up to the next nano.
    ("0.1n", Fraction(1, 10**9), "1n", "DecimalSI"),
    ("-0.1n", Fraction(-1, 10**9), "-1n", "DecimalSI"),
    ("1.0000000001", 1 + Fraction(1, 10**9), "1000000001n", "DecimalSI"),
    ("1e-12", Fraction(1, 10**9), "1e-9", "DecimalExponent"),
    ("1e-2000000000", Fraction(1, 10**9), "1e-9", "DecimalExponent"),
    # Binary SI is capped at 2^63-1, decimal is not.
    ("9999999999999999999999Ki", 2**63 - 1, "9223372036854775807", "BinarySI"),
    ("2048Ei", 2**63 - 1, "9223372036854775807", "BinarySI"),
    ("9999999999999999999999k", 9999999999999999999999000, "9999999999999999999999k",
     "DecimalSI"),
    ("1e21", 10**21, "1e21", "DecimalExponent"),
]


@pytest.mark.parametrize(("text", "value", "canonical", "format"), PARSE,
                         ids=[row[0] for row in PARSE])
def test_parse(text, value, canonical, format):
    q = Q(text)
    assert q.value == value
    assert str(q) == canonical
    assert q.format == format
    assert Q(str(q)) == q  # canonical text round-trips


INVALID = [
    ("", "regular expression"),
    (" 1", "regular expression"),
    ("1 ", "regular expression"),
    ("aoeu", "regular expression"),
    ("10Mo", "regular expression"),
    ("1.1.M", "regular expression"),
    ("1+1.0M", "regular expression"),
    ("1,3G", "regular expression"),
    ("10Mm", "suffix"),
    ("200K", "suffix"),
    ("1i", "suffix"),
    (".5i", "suffix"),
    ("0.1mi", "suffix"),
    ("0.1am", "regular expression"),
    ("-3.01e-", "suffix"),
    ("1e", "suffix"),
    ("1Ki5", "suffix"),
    ("1e99999999999", "exponent out of range"),
    ("1e20000", "exponent too large"),
]


@pytest.mark.parametrize(("text", "reason"), INVALID, ids=[repr(t) for t, _ in INVALID])
def test_parse_invalid(text, reason):
    with pytest.raises(ValueError, match=reason) as info:
        Q(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("bad", [1.5, None, True, b"1"], ids=repr)
def test_parse_rejects_non_text(bad):
    with pytest.raises(TypeError):
        Q(bad)


def test_parse_int_and_constructor():
    assert Q(5) == values.Quantity(5) == Q("5")
    assert values.Quantity(Fraction(3, 2)) == Q("1500m")
    with pytest.raises(ValueError, match="nanos"):
        values.Quantity(Fraction(1, 3))


def test_equality_ignores_format_and_hash_agrees():
    assert Q("1") == Q("1000m") == Q("1e0") == Q("0.001k")
    assert Q("1Ki") == Q("1024")
    assert len({Q("1"), Q("1000m"), Q("1e0")}) == 1
    assert Q("50M") < Q("50Mi")
    assert Q("200M") <= Q("0.2G") <= Q("200M")
    assert Q("2") > Q("1999m") >= Q("1.999")
    assert Q("1") != Q("2")


def test_arithmetic():
    assert Q("50k") + Q("20") == Q("50.02k")
    assert Q("50k") - Q("20") == Q("49.98k")
    assert str(Q("1Gi") + Q("1Gi")) == "2Gi"
    assert str(Q("0") + Q("1Gi")) == "1Gi"  # a zero takes the other's format
    assert Q("3") * 2 == 2 * Q("3") == Q("6")
    assert -Q("1.5") == Q("-1500m")
    assert Q("5") - Q("5") == Q("0") and not Q("0") and Q("1n")


@pytest.mark.parametrize(
    ("text", "is_integer", "ceil", "milli", "sign"),
    [("1", True, 1, 1000, 1), ("1500m", False, 2, 1500, 1), ("1.5Gi", True, 3 * 2**29,
     3 * 2**29 * 1000, 1), ("-1.5", False, -1, -1500, -1), ("0", True, 0, 0, 0),
     ("1n", False, 1, 1, 1)],
    ids=["1", "1500m", "1.5Gi", "-1.5", "0", "1n"])
def test_integer_helpers(text, is_integer, ceil, milli, sign):
    q = Q(text)
    assert q.is_integer() is is_integer
    assert q.ceil_int() == ceil
    assert q.milli_value() == milli
    assert q.sign() == sign


@pytest.mark.parametrize(
    ("request_", "start", "step", "expected"),
    [("1Gi", "1Gi", "1Gi", "1Gi"), ("1.5Gi", "1Gi", "1Gi", "2Gi"), ("100Mi", "1Gi", "1Gi", "1Gi"),
     ("3", "1", "2", "3"), ("4", "1", "2", "5"), ("150m", "100m", "100m", "1"),
     ("2500m", "1", "2", "3"), ("3100m", "1", "2", "5")],
    ids=["exact", "round-up", "below-min", "on-step", "between-steps", "millis-to-whole",
         "fraction-rounds-to-step", "fraction-to-next-step"])
def test_round_up_to_step(request_, start, step, expected):
    assert Q(request_).round_up_to_step(Q(start), Q(step)) == Q(expected)


@pytest.mark.parametrize(("amount", "start", "step", "on"),
                         [("3", "1", "2", True), ("4", "1", "2", False),
                          ("2500m", "1", "2", True), ("5Gi", "1Gi", "2Gi", True),
                          ("2Gi", "1Gi", "2Gi", False)])
def test_on_step(amount, start, step, on):
    assert Q(amount).on_step(Q(start), Q(step)) is on


def test_round_up_to_step_needs_positive_step():
    with pytest.raises(ValueError, match="positive"):
        Q("1").round_up_to_step(Q("0"), Q("0"))


def test_round_up_to_one_of():
    valid = [Q("1Gi"), Q("4Gi"), Q("2Gi")]
    assert Q("1.5Gi").round_up_to_one_of(valid) == Q("2Gi")
    assert Q("2Gi").round_up_to_one_of(valid) == Q("2Gi")
    assert Q("5Gi").round_up_to_one_of(valid) is None


def test_quantity_is_immutable():
    q = Q("1")
    with pytest.raises(AttributeError):
        q._value = Fraction(2)  # type: ignore[misc]


# -- Version ---------------------------------------------------------------------------

VALID_VERSIONS = [
    ("0.0.4", (0, 0, 4, (), ())),
    ("1.2.3", (1, 2, 3, (), ())),
    ("10.20.30", (10, 20, 30, (), ())),
    ("1.1.2-prerelease+meta", (1, 1, 2, ("prerelease",), ("meta",))),
    ("1.0.0-alpha.beta.1", (1, 0, 0, ("alpha", "beta", "1"), ())),
    ("1.0.0-0A.is.legal", (1, 0, 0, ("0A", "is", "legal"), ())),
    ("1.0.0+0.build.1-rc.10000aaa-kk-0.1", (1, 0, 0, (), ("0", "build", "1-rc", "10000aaa-kk-0",
                                                      "1"))),
    ("580.126.20", (580, 126, 20, (), ())),
    ("18446744073709551615.0.0", (2**64 - 1, 0, 0, (), ())),
]


@pytest.mark.parametrize(("text", "parts"), VALID_VERSIONS, ids=[t for t, _ in VALID_VERSIONS])
def test_version_parse(text, parts):
    v = V(text)
    assert (v.major, v.minor, v.patch, v.prerelease, v.build) == parts
    assert v.text == str(v) == text


INVALID_VERSIONS = ["1", "1.2", "1.2.3.4", "01.1.1", "1.01.1", "1.1.01", "1.2.3-0123",
                    "1.2.3-", "1.2.3+", "1.2.3-alpha..1", "v1.2.3", " 1.2.3", "1.2.3 ",
                    "1.2.3-al_pha", "18446744073709551616.0.0", "1.2.3-18446744073709551616",
                    "", "a.b.c"]


@pytest.mark.parametrize("text", INVALID_VERSIONS, ids=[repr(t) for t in INVALID_VERSIONS])
def test_version_parse_invalid(text):
    with pytest.raises(ValueError, match="semantic version"):
        V(text)


SEMVER_ORG_ORDER = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
                    "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0",
                    "2.1.1"]


@pytest.mark.parametrize(("low_text", "high_text"), list(itertools.pairwise(SEMVER_ORG_ORDER)),
                         ids=[f"{a}<{b}" for a, b in itertools.pairwise(SEMVER_ORG_ORDER)])
def test_semver_org_precedence(low_text, high_text):
    low, high = V(low_text), V(high_text)
    assert low < high and low <= high and high > low and high >= low
    assert low.compare(high) == -1 and high.compare(low) == 1


def test_sorting_follows_precedence():
    shuffled = list(reversed(SEMVER_ORG_ORDER))
    assert [v.text for v in sorted(V(t) for t in shuffled)] == SEMVER_ORG_ORDER


def test_build_metadata_ignored_for_precedence_but_not_equality():
    a, b = V("1.0.0+a"), V("1.0.0+b")
    assert a.compare(b) == 0 and a <= b and a >= b and not a < b
    assert a != b  # matchAttribute compares version attributes as strings
    assert a == V("1.0.0+a") and hash(a) == hash(V("1.0.0+a"))
    assert a.precedence_key == b.precedence_key


@pytest.mark.parametrize(
    ("text", "normalized"),
    [("v1.0.0", "1.0.0"), ("1.0", "1.0.0"), ("1", "1.0.0"), ("01.01.01", "1.1.1"),
     ("v1.2.3-beta", "1.2.3-beta"), ("1.2.03-beta", "1.2.3-beta"), ("00.0.000", "0.0.0")],
    ids=["v-prefix", "major.minor", "major", "leading-zeros", "v-prerelease", "zero-patch",
         "zeros"])
def test_version_normalize(text, normalized):
    assert V(text, normalize=True).text == normalized


@pytest.mark.parametrize("text", ["1.0-beta", "1+meta", "vv1.0.0", "hello"],
                         ids=["short-pre", "short-build", "double-v", "word"])
def test_version_normalize_invalid(text):
    with pytest.raises(ValueError):
        V(text, normalize=True)
