"""The compiled checks beside orjson (`fitcore._load.walk`, `scan_json`) against what
Python counts in the same JSON: keys, values and depth of the parsed value; members and
long numbers of the text, strings full of quotes, backslashes and digits included."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore import read, yaml11

pytestmark = pytest.mark.skipif(read.compiled is None, reason="FITCORE_NO_EXTENSIONS=1: "
                                "the compiled checks are not used, the json module reads")

TEXT = st.text(alphabet=st.sampled_from('ab1"\\\\:{}[], \n\u00e9'), max_size=8)
SCALARS = st.one_of(st.none(), st.booleans(), TEXT,
                    st.integers(min_value=-(10**25), max_value=10**25))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=30)


def counts(value: Any, depth: int = 1) -> tuple[int, int, int]:
    """(keys, values, depth) as the walk counts them."""
    if isinstance(value, dict):
        inner = [counts(v, depth + 1) for v in value.values()]
        own = len(value)
    elif isinstance(value, list):
        inner = [counts(v, depth + 1) for v in value]
        own = 0
    else:
        return 0, 0, 0
    return (own + sum(k for k, _, _ in inner), len(inner) + sum(n for _, n, _ in inner),
            max([depth] + [d for _, _, d in inner]))


def long_numbers(value: Any) -> int:
    if isinstance(value, dict):
        return sum(long_numbers(v) for v in value.values())
    if isinstance(value, list):
        return sum(long_numbers(v) for v in value)
    return int(type(value) is int and len(str(abs(value))) >= 19)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.booleans())
def test_walk_and_scan_count_what_python_counts(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False).encode()
    keys, values, depth = counts(value)
    assert read.compiled.scan_json(text) == (keys, long_numbers(value))
    if depth:
        assert read.compiled.walk(value, read.LimitError, depth, values + 1) == keys
        with pytest.raises(read.LimitError, match="nested more than"):
            read.compiled.walk(value, read.LimitError, depth - 1, 10**9)
    if values:
        with pytest.raises(read.LimitError, match="expands to more than"):
            read.compiled.walk(value, read.LimitError, 1000, values)


@pytest.mark.parametrize(("text", "members"), [
    (rb'{"a\\": 1}', 1), (rb'{"a\\\\": 1, "b\"c": 2}', 2), (rb'["x\\\\", "y\\\"", "z"]', 0),
    (rb'{"k": "v:\\\"", "w": 1}', 2), (rb'{"unterminated\\', 0)])
def test_scan_ends_a_string_at_a_quote_not_escaped(text: bytes, members: int) -> None:
    assert read.compiled.scan_json(text)[0] == members


# The YAML builder (fitcore/_load.pyx) answers a plain scalar longer than any of
# yaml11.WORDS that does not start as a number does with its own text, without
# yaml11.resolve: what resolve answers.
LONGEST_WORD = 5


def test_no_yaml11_word_is_longer_than_the_builder_assumes() -> None:
    assert max(len(w) for w in yaml11.WORDS) == LONGEST_WORD


@settings(max_examples=500, deadline=None)
@given(st.text(min_size=1).filter(lambda t: len(t.encode()) > LONGEST_WORD  # as libyaml's
                                  and t[0] not in ".+-0123456789"))  # bytes are counted
def test_a_long_plain_text_not_starting_as_a_number_resolves_to_itself(text: str) -> None:
    assert yaml11.resolve(text) is text


@pytest.mark.parametrize("text", ["yes", "Off", "NULL", "~", "-.inf", "+.INF", "0x1F",
                                  "1_000", ".5", "abcdef", "true_", "-12345678", "9.5e+10"])
def test_the_builder_reads_plain_scalars_as_resolve_does(text: str) -> None:
    assert read.load_yaml(f"v: {text}\n") == [{"v": yaml11.resolve(text)}]
