"""YAML read as Kubernetes reads it (YAML 1.1, go-yaml v2 under sigs.k8s.io/yaml), by the
compiled reader (fitcore._load) and the PyYAML reference alike; and where that differs
from what the PyYAML safe loader (the reader before them) made of the same text."""

from __future__ import annotations

import datetime
import json
import math
import pathlib
import random
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcore import read

# "compiled" is the reader `fitgate fit` uses: the PyYAML one under FITCORE_NO_EXTENSIONS=1.
READERS: dict[str, Callable[[str], list[Any]]] = {
    "compiled": lambda text: read.load_yaml(text),
    "reference": lambda text: read.load_yaml(text, reference=True)}


@pytest.fixture(params=sorted(READERS))
def load(request: pytest.FixtureRequest) -> Any:
    return READERS[request.param]


def _value(load: Any, text: str) -> Any:
    docs = load(f"v: {text}\n")
    assert len(docs) == 1
    return docs[0]["v"]


NAN = object()  # stands for float("nan"), which equals nothing

# (plain scalar text, what Kubernetes reads, what PyYAML's safe loader read if different)
SAME = object()
SCALARS = [
    *[(t, True, SAME) for t in ("yes", "Yes", "YES", "on", "On", "ON", "true", "True",
                                "TRUE")],
    *[(t, False, SAME) for t in ("no", "No", "NO", "off", "Off", "OFF", "false", "False",
                                 "FALSE")],
    ("y", True, "y"), ("Y", True, "Y"), ("n", False, "n"), ("N", False, "N"),
    ("yEs", "yEs", SAME), ("oN", "oN", SAME), ("nO", "nO", SAME),
    ("~", None, SAME), ("null", None, SAME), ("Null", None, SAME), ("NULL", None, SAME),
    ("nULL", "nULL", SAME),
    ("0", 0, SAME), ("128", 128, SAME), ("-12", -12, SAME), ("+12", 12, SAME),
    ("0777", 0o777, SAME), ("-0777", -0o777, SAME), ("0x1F", 31, SAME),
    ("0b101", 5, SAME), ("-0b11", -3, SAME), ("1_000", 1000, SAME),
    ("0o17", 15, "0o17"), ("08", 8.0, "08"),
    ("9223372036854775807", 2**63 - 1, SAME), ("18446744073709551615", 2**64 - 1, SAME),
    ("18446744073709551616", float(2**64), 2**64),
    ("1.5", 1.5, SAME), ("1.0e+3", 1000.0, SAME), ("1e3", 1000.0, "1e3"),
    (".5", 0.5, SAME), ("-.5", -0.5, "-.5"), ("1.", 1.0, SAME),
    (".inf", math.inf, SAME), (".Inf", math.inf, SAME), ("-.INF", -math.inf, SAME),
    ("+.inf", math.inf, SAME), (".nan", NAN, NAN), (".NaN", NAN, NAN),
    ("inf", "inf", SAME), ("nan", "nan", SAME), ("1e400", "1e400", SAME),
    ("1:30", "1:30", 90), ("0000:32:00.0", "0000:32:00.0", 1920.0),
    ("2001-12-14", "2001-12-14", datetime.date(2001, 12, 14)),
    ("2001-12-14T21:59:43.10-05:00", "2001-12-14T21:59:43.10-05:00",
     datetime.datetime(2001, 12, 14, 21, 59, 43, 100000,
                       tzinfo=datetime.timezone(datetime.timedelta(hours=-5)))),
    ("80Gi", "80Gi", SAME), ("550.54.15", "550.54.15", SAME), ("1.2.3", "1.2.3", SAME),
    ("GPU-283fefc6", "GPU-283fefc6", SAME), ("-x", "-x", SAME), ("0x", "0x", SAME),
    ("'yes'", "yes", SAME), ('"0777"', "0777", SAME), ("'~'", "~", SAME),
    ("''", "", SAME), ('"1e3"', "1e3", SAME), ("'true'", "true", SAME),
    ("!!str 0777", "0777", SAME), ("!!int '12'", 12, SAME), ("!!float 3", 3.0, SAME),
    ("!!bool yes", True, SAME), ("! yes", "yes", True), ("!!null ''", None, SAME),
]


def _same(got: Any, want: Any) -> bool:
    if want is NAN:
        return isinstance(got, float) and math.isnan(got)
    return type(got) is type(want) and got == want


@pytest.mark.parametrize(("text", "want", "pyyaml"), SCALARS, ids=[c[0] for c in SCALARS])
def test_a_scalar_reads_as_kubernetes_reads_it(load: Any, text: str, want: Any,
                                               pyyaml: Any) -> None:
    got = _value(load, text)
    assert _same(got, want), (text, got, want)
    before = yaml.safe_load(f"v: {text}\n")["v"]
    assert _same(before, want if pyyaml is SAME else pyyaml), (text, before)


@pytest.mark.parametrize("text", ["!!int abc", "!!bool 12", "!!float yes", "!!binary aGk="])
def test_a_tag_the_text_does_not_fit_is_refused_by_line(load: Any, text: str) -> None:
    with pytest.raises(read.LimitError, match=r"^line 2: "):
        load(f"a: 1\nv: {text}\n")


def test_a_custom_tag_leaves_the_text_as_go_yaml_does(load: Any) -> None:
    assert load("v: !custom 12\nw: !thing {a: 1}\n") == [{"v": "12", "w": {"a": 1}}]


@pytest.mark.parametrize(("text", "want", "pyyaml"), [
    ("yes: 1", {"true": 1}, {True: 1}),
    ("n: 1", {"false": 1}, {"n": 1}),
    ("1: a", {"1": "a"}, {1: "a"}),
    ("0x10: a", {"16": "a"}, {16: "a"}),
    ("'1': a", {"1": "a"}, {"1": "a"}),
], ids=["yes", "n", "int", "hex", "quoted"])
def test_a_key_becomes_a_json_key_as_sigs_k8s_io_yaml_makes_it(load: Any, text: str,
                                                               want: Any, pyyaml: Any) -> None:
    assert load(text + "\n") == [want]
    assert yaml.safe_load(text + "\n") == pyyaml


@pytest.mark.parametrize(("text", "what"), [
    ("~: 1", "not null"), ("1.5: a", "not the number 1.5"), ("[a]: 1", "not a list"),
    ("{a: 1}: 1", "not a mapping"), ("? [a]\n: 1", "not a list"),
], ids=["null", "float", "flow-list", "flow-map", "complex"])
def test_a_key_that_is_no_json_key_is_refused_by_line(load: Any, text: str,
                                                      what: str) -> None:
    with pytest.raises(read.LimitError, match=rf"^line 2: a mapping key must be a string, "
                                              rf"{what}"):
        load("a: 1\n" + text + "\n")


def test_anchors_aliases_and_merge_keys(load: Any) -> None:
    text = ("base: &base {x: 1, q: 2}\n"  # (not `y`: a key `y` is "true")
            "other: &other {q: 20, z: 30}\n"
            "copy: *base\n"
            "merged:\n  <<: *base\n  q: 3\n"
            "both:\n  <<: [*base, *other]\n  w: 0\n"
            "scalar: &s hello\n"
            "again: *s\n")
    [doc] = load(text)
    assert doc["copy"] == {"x": 1, "q": 2}
    assert doc["copy"] is doc["base"]  # an alias shares the anchored value
    assert doc["merged"] == {"x": 1, "q": 3}
    assert doc["both"] == {"x": 1, "q": 2, "z": 30, "w": 0}  # earlier maps take precedence
    assert doc["again"] == "hello"
    assert yaml.safe_load(text) == doc  # PyYAML agrees on all of these


def test_a_merge_after_a_key_overrides_it_as_go_yaml_v2_does(load: Any) -> None:
    text = "a: &a {x: 1}\nb:\n  x: 0\n  <<: *a\n"
    assert load(text) == [{"a": {"x": 1}, "b": {"x": 1}}]
    assert yaml.safe_load(text)["b"] == {"x": 0}  # PyYAML: an explicit key always wins


@pytest.mark.parametrize(("text", "line"), [
    ("a: 1\nb: 2\na: 3\n", 3),
    ("a: &a {x: 1}\nb:\n  <<: *a\n  y: 1\n  y: 2\n", 5),
    ("a:\n  - {k: 1, k: 2}\n", 2),
], ids=["top", "after-merge", "flow"])
def test_a_duplicate_key_is_refused_by_line(load: Any, text: str, line: int) -> None:
    with pytest.raises(read.LimitError, match=rf"^line {line}: duplicate key"):
        load(text)


def test_a_merged_key_set_again_literally_is_no_duplicate(load: Any) -> None:
    assert load("a: &a {x: 1}\nb:\n  <<: *a\n  x: 2\n")[0]["b"] == {"x": 2}


def test_a_merge_of_something_else_than_mappings_is_refused(load: Any) -> None:
    with pytest.raises(read.LimitError, match=r"^line 2: a merge key"):
        load("a: &a [1]\nb: {<<: *a}\n")


def test_multi_document_streams(load: Any) -> None:
    text = "a: 1\n---\nb: yes\n---\n--- 'x'\n...\n"
    assert load(text) == [{"a": 1}, {"b": True}, None, "x"]
    assert load("") == []
    assert load("# only a comment\n") == []


def test_a_kind_list_is_flattened_into_its_items(load: Any) -> None:
    text = ("apiVersion: v1\nkind: List\nitems:\n"
            "- {apiVersion: v1, kind: Node, metadata: {name: a}}\n"
            "- {apiVersion: v1, kind: Node, metadata: {name: b, labels: {gpu: yes}}}\n")
    [doc] = load(text)
    items = [o for o, _ in read.flatten(doc, "f.yaml")]
    assert [o["metadata"]["name"] for o in items] == ["a", "b"]
    assert items[1]["metadata"]["labels"] == {"gpu": True}


def test_text_that_is_not_yaml_names_line_and_column(load: Any) -> None:
    with pytest.raises(yaml.YAMLError, match=r"line 3, column \d+"):
        load("a: 1\nb: [1, 2\nc: 3\n")


def test_the_limits_hold(load: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "a: " + "[" * (read.MAX_DEPTH + 1) + "]" * (read.MAX_DEPTH + 1) + "\n"
    with pytest.raises(read.LimitError, match="nested more than"):
        load(deep)
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    with pytest.raises(read.LimitError, match="expands to more than"):
        load(laughs)
    # an alias inside its own anchor: LimitError from the compiled reader, PyYAML's
    # ConstructorError from the reference (both a ValueError or a YAMLError, exit 2)
    with pytest.raises((read.LimitError, yaml.YAMLError)):
        load("a: &a [*a]\n")


@pytest.mark.parametrize("limit", [6, 7, 8, 12, 13])
def test_both_readers_count_values_alike(monkeypatch: pytest.MonkeyPatch,
                                         limit: int) -> None:
    """Values, not keys, count against MAX_NODES; an alias counts what it expands to."""
    monkeypatch.setattr(read, "MAX_NODES", limit)
    text = "a: &a {x: 1, y: [2, 3]}\nb: *a\n"  # 1 + (1 + 1 + 1 + 2) * 2 = 11 values
    outcomes: list[Any] = []
    for reader in (READERS["compiled"], READERS["reference"]):
        try:
            outcomes.append(len(reader(text)))
        except read.LimitError:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1] == ("refused" if limit < 11 else 1)


def test_the_compiled_reader_gives_what_the_reference_gives_on_an_inventory(
        tmp_path: pathlib.Path) -> None:
    from bench import load as bench_load
    paths = bench_load.write(tmp_path, 30)
    text = paths["yaml"].read_text()
    compiled = read.load_yaml(text)
    assert compiled == read.load_yaml(text, reference=True)
    # ... and what the same objects written as JSON read to, with both JSON readers.
    json_text = paths["json"].read_text()
    assert read.load_json(json_text) == [compiled[0]]
    assert read.load_json(json_text, reference=True) == [compiled[0]]


_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.floats(allow_nan=False), st.text(max_size=12),
    st.sampled_from(["y", "n", "yes", "On", "0777", "0o17", "0x1F", "1e3", "1:30", "08",
                     "2001-12-14", "~", "<<", "-", ".5", "+1", "1_0", "- a", "a: b"]))
_TREE = st.recursive(_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(tree=_TREE, flow=st.sampled_from([None, True, False]),
       seed=st.integers(0, 2**16))
def test_the_compiled_reader_agrees_with_the_reference(tree: Any, flow: Any,
                                                      seed: int) -> None:
    """Any tree written any way PyYAML writes it (plain where it thinks that is safe,
    which is not always so for YAML 1.1: `y`, `0o17`, ...), read by both readers."""
    text = yaml.safe_dump({"doc": tree, "n": seed}, default_flow_style=flow,
                          allow_unicode=bool(random.Random(seed).getrandbits(1)))
    assert _outcome(read.load_yaml, text) == _outcome(
        lambda t: read.load_yaml(t, reference=True), text)


def _outcome(reader: Any, text: str) -> str:
    """The value read (as canonical JSON), or the refusal: both readers refuse alike."""
    try:
        value = reader(text)
    except read.LimitError as exc:
        return f"refused: {exc}"
    return json.dumps(value, sort_keys=True, default=repr, allow_nan=True)


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"a" : 1, "b": {"c": 1, "c" : 2}}', "duplicate key 'c'"),
    ('{"s": "x\\":y", "a": 1, "a": 1}', "duplicate key 'a'"),
    ('[{"k": 1}, {"k": 2, "k": 3}]', "duplicate key 'k'"),
], ids=["plain", "blanks", "colon-in-string", "in-list"])
def test_json_duplicate_keys_are_refused(text: str, message: str) -> None:
    with pytest.raises(read.LimitError, match=message):
        read.load_json(text)


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [1, 2.5, true, null, "x"]}',
    '{"s": "x\\":y", "t": "a\\" : b", "u" :\n 1}',
    '[{"k": 1}, {"k": 2}]',
    '{"big": 123456789012345678901234567890}',
    '{"deep": ' + "[" * 50 + "]" * 50 + "}",
], ids=["plain", "colons-in-strings", "list", "beyond-64-bits", "deep"])
def test_json_reads_what_the_json_module_reads(text: str) -> None:
    value = json.loads(text)
    assert read.load_json(text) == (value if isinstance(value, list) else [value])


def test_json_limits_hold() -> None:
    with pytest.raises(read.LimitError, match="nested"):
        read.load_json('{"a": ' + "[" * (read.MAX_DEPTH + 1) + "]" * (read.MAX_DEPTH + 1)
                       + "}")
