"""`fitgate fit` hands a file's bytes to the readers (libyaml and orjson read UTF-8
themselves): what it reads, and what it refuses, are what decoding the file first gave."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from admission.app import offline
from fitcore import read

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INVENTORY = sorted((EXAMPLES / "inventory").glob("*.yaml"))

READERS = {"compiled": False, "reference": True}


@pytest.mark.parametrize("reference", READERS.values(), ids=READERS.keys())
@pytest.mark.parametrize("path", INVENTORY, ids=[p.name for p in INVENTORY])
def test_yaml_bytes_read_as_the_decoded_text(path: pathlib.Path, reference: bool) -> None:
    text = path.read_text()
    want = read.load_yaml(text, reference=reference)
    assert want and read.load_yaml(text.encode(), reference=reference) == want
    crlf = text.replace("\n", "\r\n").encode()
    assert read.load_yaml(crlf, reference=reference) == want


@pytest.mark.parametrize("reference", READERS.values(), ids=READERS.keys())
def test_json_bytes_read_as_the_decoded_text(reference: bool) -> None:
    docs = [d for p in INVENTORY for d in yaml.safe_load_all(p.read_text()) if d]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=1)
    want = read.load_json(text, reference=reference)
    assert read.load_json(text.encode(), reference=reference) == want
    assert read.load_json(text.replace("\n", "\r\n").encode(), reference=reference) == want


# (file bytes, suffix): none is UTF-8, so none is read, whatever else is wrong with it
NOT_UTF8 = {
    "yaml-latin1": ("name: caf\xe9\n".encode("latin-1"), ".yaml"),
    "yaml-latin1-after-a-duplicate-key": (
        b"a: 1\na: 2\n" + b"".join(b"k%d: 1\n" % i for i in range(20_000)) + b"b: \xe9\n",
        ".yaml"),
    "yaml-latin1-after-bad-yaml": (b"a: [\n" + b"b: \xe9\n", ".yaml"),
    "yaml-utf16": ("kind: List\nitems: []\n".encode("utf-16"), ".yaml"),
    "json-latin1": ('{"kind": "caf\xe9"}'.encode("latin-1"), ".json"),
    "json-looking-latin1": ('{"kind": "caf\xe9"}'.encode("latin-1"), ".txt"),
}


@pytest.mark.parametrize("name", NOT_UTF8)
def test_a_file_that_is_not_utf8_cannot_be_read(tmp_path: pathlib.Path, name: str) -> None:
    data, suffix = NOT_UTF8[name]
    path = tmp_path / f"inventory{suffix}"
    path.write_bytes(data)
    with pytest.raises(offline.UsageError, match=rf"^{path}: cannot read: 'utf-8' codec"):
        offline.read_documents([str(path)])


def test_a_bom_and_windows_line_ends_read_as_before(tmp_path: pathlib.Path) -> None:
    want = offline.read_documents([str(p) for p in INVENTORY])
    crlf = tmp_path / "inventory.yaml"
    crlf.write_bytes(b"\xef\xbb\xbf" + b"\n---\n".join(
        p.read_bytes().replace(b"\n", b"\r\n") for p in INVENTORY))
    got = offline.read_documents([str(crlf)])
    assert [d for d, _ in got] == [d for d, _ in want]
