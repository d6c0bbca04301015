"""Read objects the way the API server would hand them to the scheduler.

What `kubectl apply` and the API server do to an object before the scheduler sees it, and
what fitgate must therefore do to a YAML file before it reasons about it:

- **Limits.** A document is parsed only if it nests at most `MAX_DEPTH` levels, expands to
  at most `MAX_NODES` values (YAML aliases included) and its file is at most `MAX_BYTES`;
  otherwise the file is refused with a plain error (never a traceback). Duplicate keys
  are refused, as strict decoding does.
- **Kinds.** Lists are flattened. A kind fitgate reads in a version the API does not serve
  (for fitgate) is an error; a kind of another API (a ConfigMap, a Deployment, a
  kustomization) is skipped and counted (`Sorted.skipped`); a kind that is neither, in an
  API group fitgate reads, is a misspelling and an error.
- **Strict fields** (`fitcore.schema`): an unknown field is an error with its path, or a
  warning when lenient.
- **Conversion** to the version fitcore reads: resource.k8s.io v1beta1 (devices under
  `basic:`, requests without `exactly:`) and v1beta2 (the v1 shape) become v1.
- **Defaulting**: `generateName` gives a name; container `limits` stand in for missing
  `requests`; a Node without `status.allocatable` gets `status.capacity`.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson
import yaml

from fitcore import errors, kube, schema, yaml11

MAX_DEPTH = 100
MAX_NODES = 5_000_000
MAX_BYTES = 256 * 1024 * 1024

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: (group, kind) -> the versions fitgate reads. resource.k8s.io lists the versions the API
#: server serves from 1.34 to 1.37.
READ: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Node"): ("v1",),
    ("", "Pod"): ("v1",),
    ("batch", "Job"): ("v1",),
    ("resource.k8s.io", "ResourceSlice"): ("v1", "v1beta2", "v1beta1"),
    ("resource.k8s.io", "DeviceClass"): ("v1", "v1beta2", "v1beta1"),
    ("resource.k8s.io", "ResourceClaim"): ("v1", "v1beta2", "v1beta1"),
    ("resource.k8s.io", "ResourceClaimTemplate"): ("v1", "v1beta2", "v1beta1"),
    ("resource.k8s.io", "DeviceTaintRule"): ("v1", "v1beta2", "v1alpha3"),
    ("kueue.x-k8s.io", "Workload"): ("v1beta2",),
    ("fitgate.io", "NodeShape"): ("v1alpha1",),
}
#: API groups fitgate reads: an unknown kind there is a misspelling, not another API's.
GROUPS = frozenset(g for g, _ in READ)
#: resource.k8s.io/v1 DeviceTaintRule (GA in 1.37) has the v1beta2 fields; the
#: kubernetes-asyncio release the schemas come from (36) predates it.
_SCHEMA_ALIAS = {"resource.k8s.io/v1/DeviceTaintRule": ("resource.k8s.io/v1beta2",
                                                        "DeviceTaintRule")}


class LimitError(ValueError):
    """A document beyond fitgate's size or depth limits, or not decodable strictly."""


# ---------------------------------------------------------------------------- YAML


class SyntaxProblem(yaml.YAMLError):
    """Text that is not YAML, with the line and column where the parser stopped."""

    def __init__(self, problem: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {problem}")
        self.line, self.column = line, column


def _load_compiled() -> Any:
    if os.environ.get("FITCORE_NO_EXTENSIONS", "") not in ("", "0"):
        return None
    try:
        from fitcore import _load
    except ImportError as exc:  # pragma: no cover - exercised by a packaging test
        raise ImportError(
            "fitcore's compiled YAML reader (fitcore._load) is not built. Build it "
            "with `pip install -e .` (or `make setup`; it needs libyaml's headers, Debian "
            "libyaml-dev) from the repository root, or set FITCORE_NO_EXTENSIONS=1 to use "
            "the slower PyYAML reader.") from exc
    return _load


#: The compiled YAML reader (`fitcore._load`), None with FITCORE_NO_EXTENSIONS=1.
compiled: Any = _load_compiled()

_PLAIN = "tag:fitgate.io,2026:plain"  # a plain untagged scalar, resolved by yaml11
_MERGE = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """The reference YAML reader, PyYAML's (its Python parser: the C one hides a scalar's
    `!` tag from the resolver), read as the compiled one reads (and as Kubernetes does:
    fitcore.yaml11): plain scalars resolved by `yaml11.resolve`, keys made JSON keys,
    go-yaml v2 merge keys, duplicate keys refused."""

    def get_event(self) -> Any:
        event = super().get_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.ScalarEvent) and event.tag == "!":
            # `! text` is a string (go-yaml); PyYAML would resolve it as a plain scalar.
            event = yaml.ScalarEvent(event.anchor, "tag:yaml.org,2002:str", (False, False),
                                     event.value, event.start_mark, event.end_mark,
                                     event.style)
        return event

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            return _PLAIN if implicit[0] else "tag:yaml.org,2002:str"
        if kind is yaml.SequenceNode:
            return "tag:yaml.org,2002:seq"
        return "tag:yaml.org,2002:map"


def _line(node: Any) -> int:
    return int(node.start_mark.line) + 1


def _mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    out: dict[str, Any] = {}
    literal: set[str] | None = None  # after a merge: the keys set literally
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE or (key_node.tag == _PLAIN and key_node.value == "<<"):
            value = loader.construct_object(value_node, deep=True)
            if literal is None:
                literal = set(out)
            for m in reversed(value) if isinstance(value, list) else (value,):
                if not isinstance(m, dict):
                    raise LimitError(f"line {_line(key_node)}: a merge key (<<) takes a "
                                     "mapping or a list of mappings")
                out.update(m)
            continue
        try:
            key = yaml11.key(loader.construct_object(key_node, deep=True))
        except yaml11.BadKey as exc:
            raise LimitError(f"line {_line(key_node)}: {exc}") from None
        if key in (literal if literal is not None else out):
            raise LimitError(f"line {_line(key_node)}: duplicate key {key!r}")
        if literal is not None:
            literal.add(key)
        out[key] = loader.construct_object(value_node, deep=True)
    return out


def _scalar(loader: Any, node: Any) -> Any:
    if node.tag == _PLAIN:
        return yaml11.resolve(node.value)
    try:
        return yaml11.tagged(node.tag, node.value)
    except ValueError as exc:
        raise LimitError(f"line {_line(node)}: {exc}") from None


def _other(loader: Any, tag_suffix: Any, node: Any = None) -> Any:
    """Any other tag: on a scalar as `yaml11.tagged`, a container read as untagged."""
    node = tag_suffix if node is None else node
    if isinstance(node, yaml.MappingNode):
        return _mapping(loader, node)
    if isinstance(node, yaml.SequenceNode):
        return [loader.construct_object(n, deep=True) for n in node.value]
    return _scalar(loader, node)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _mapping)
for _tag in (_PLAIN, "tag:yaml.org,2002:str", "tag:yaml.org,2002:int",
             "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null",
             "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:binary"):
    _StrictLoader.add_constructor(_tag, _scalar)
_StrictLoader.add_constructor(None, _other)


def _check_depth(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise LimitError(f"line {line}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _count(doc: Any, depth_limit: bool = False) -> int:
    """Refuse a document that expands (through aliases) to more than MAX_NODES values, or
    (with `depth_limit`) that nests more than MAX_DEPTH levels; the number of mapping
    keys it holds. One walk over containers only, testing exact types: parsers give
    plain dicts and lists, and `isinstance` against `Mapping` on every scalar of a
    5,000-node inventory costs a second."""
    n = 1
    keys = 0
    todo = [(doc, 1)] if _container(doc) else []
    while todo:
        v, depth = todo.pop()
        if depth_limit and depth > MAX_DEPTH:
            raise LimitError(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(v, Mapping):
            values = v.values()
            keys += len(v)
        else:
            values = v
        n += len(values)
        if n > MAX_NODES:
            raise LimitError(f"expands to more than {MAX_NODES:,} values (YAML aliases?)")
        depth += 1
        for x in values:
            t = type(x)
            if t is dict or t is list or (t not in _SCALARS and _container(x)):
                todo.append((x, depth))
    return keys


_SCALARS = frozenset((str, int, float, bool, type(None)))


def _container(v: Any) -> bool:
    return isinstance(v, (Mapping, list))


def load_yaml(text: str | bytes, *, reference: bool = False) -> list[Any]:
    """Every document of a YAML text (YAML 1.1 as Kubernetes reads it: fitcore.yaml11),
    within the limits (LimitError otherwise, naming the line; SyntaxProblem, a
    yaml.YAMLError, for text that is not YAML). The compiled reader
    (`fitcore._load`) reads it unless FITCORE_NO_EXTENSIONS=1 or `reference` asks
    for the PyYAML reader, which gives the same values ten times slower.

    `text` may be a file's bytes, read as UTF-8 (UnicodeDecodeError otherwise, as
    decoding them first would raise): the compiled reader takes them as they are, which
    spares decoding the file and encoding it again (libyaml checks the UTF-8 itself)."""
    if len(text) > MAX_BYTES:
        raise LimitError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB")
    if isinstance(text, bytes) and (compiled is None or reference
                                    or text.startswith(_UTF16_BOMS)):
        text = text.decode()  # libyaml would read UTF-16 with a BOM; the file reader did not
    if compiled is not None and not reference:
        try:
            docs: list[Any] = compiled.load_all(
                text if isinstance(text, bytes) else text.encode(), yaml11.resolve,
                yaml11.key, yaml11.tagged, LimitError, SyntaxProblem, MAX_DEPTH, MAX_NODES)
        except (SyntaxProblem, LimitError):
            if isinstance(text, bytes):
                text.decode()  # bytes that are not UTF-8 are that, not a YAML problem
            raise
        return docs
    assert isinstance(text, str)
    _check_depth(text)
    try:
        docs = list(yaml.load_all(text, Loader=_StrictLoader))
    except RecursionError as exc:  # pragma: no cover - the depth check comes first
        raise LimitError(f"nested more than {MAX_DEPTH} levels deep") from exc
    for d in docs:
        _count(d)
    return docs


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise LimitError(f"duplicate key {k!r}")
            seen.add(k)
    return out


def load_json(text: str | bytes, *, reference: bool = False) -> list[Any]:
    """The value of a JSON text as a list of documents (a JSON array is its items), within
    the limits of `load_yaml` (LimitError otherwise; ValueError for text that is not one
    JSON value). `text` may be a file's bytes, read as UTF-8 (UnicodeDecodeError
    otherwise): orjson reads them without a decoded copy.

    orjson parses it (several times faster than `json` with a hook per object) but keeps
    the last of duplicate keys silently and makes a float of an integer beyond 64 bits;
    so the text is scanned (`fitcore._load.scan_json`: its object members, and whether
    it has a number of 19 digits or more). When the parsed objects hold as many keys as
    the text has members, and no number is that long, orjson's value is the one.
    Otherwise, for anything orjson refuses, with FITCORE_NO_EXTENSIONS=1 and with
    `reference`, the `json` module reads the text, with a hook that names a duplicate
    key."""
    if len(text) > MAX_BYTES:
        raise LimitError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB")
    if compiled is not None and not reference:
        data = text if isinstance(text, bytes) else text.encode()
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the json module says what is wrong, or reads what orjson does not
        else:
            docs = value if isinstance(value, list) else [value]
            keys = sum(compiled.walk(d, LimitError, MAX_DEPTH, MAX_NODES) for d in docs)
            members, long_numbers = compiled.scan_json(data)
            if keys == members and not long_numbers:
                return docs
    if isinstance(text, bytes):
        text = text.decode()
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_json_int)
    except RecursionError as exc:
        raise LimitError("nested too deep") from exc
    docs = value if isinstance(value, list) else [value]
    for d in docs:
        _count(d, depth_limit=True)
    return docs


def _json_int(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:  # more digits than Python converts
        raise LimitError(f"an integer of {len(text.lstrip('-')):,} digits; no Kubernetes "
                         "field holds one that large") from exc


# ---------------------------------------------------------------------- progress


class Progress:
    """Progress of a long load, for a person waiting at a terminal: once `after` seconds
    have passed since it was made, `step(done)` writes "reading inventory: 2,345 of 5,000
    objects ..." through `write`, at most one line per `every` seconds; a load done
    sooner writes nothing. `total` is set once the files are parsed. `clock` is
    injectable (tests drive it; no sleeping)."""

    def __init__(self, write: Callable[[str], Any], *, what: str = "inventory",
                 clock: Callable[[], float] = time.monotonic, after: float = 1.0,
                 every: float = 1.0) -> None:
        self.write, self.what, self.clock = write, what, clock
        self.after, self.every = after, every
        self.total = 0
        self.started = clock()
        self._last: float | None = None

    def step(self, done: int) -> None:
        now = self.clock()
        if now - self.started < self.after or (
                self._last is not None and now - self._last < self.every):
            return
        self._last = now
        self.write(f"reading {self.what}: {done:,} of {self.total:,} objects ...\n")


# ------------------------------------------------------------------------- kinds


def split_version(api_version: str) -> tuple[str, str]:
    group, sep, version = api_version.rpartition("/")
    return (group, version) if sep else ("", api_version)


@dataclasses.dataclass
class Sorted:
    """Objects fitgate reads (normalized to the versions it parses), the count of skipped
    objects per `apiVersion kind`, warnings (lenient mode) and errors."""

    objects: list[tuple[dict[str, Any], str | None]] = dataclasses.field(default_factory=list)
    skipped: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    warnings: list[str] = dataclasses.field(default_factory=list)
    problems: list[errors.FieldError] = dataclasses.field(default_factory=list)


def _flatten(obj: Any, source: str | None) -> Iterator[tuple[Any, str | None]]:
    todo = collections.deque([obj])
    while todo:
        o = todo.popleft()
        mapping = type(o) is dict or isinstance(o, Mapping)
        kind = o.get("kind") if mapping else None
        items = o.get("items") if mapping else None
        if type(kind) is str and kind.endswith("List") and type(items) is list:
            item_kind = kind[:-len("List")]
            for item in items:
                if isinstance(item, Mapping) and item_kind and "kind" not in item:
                    # A typed list (ResourceSliceList) leaves kind and version to the list.
                    item = {"apiVersion": o.get("apiVersion"), "kind": item_kind, **item}
                todo.append(item)
        else:
            yield o, source


def flatten(obj: Any, source: str | None = None) -> Iterator[tuple[Any, str | None]]:
    """The objects of a document: the items of a List (or a typed list), or itself."""
    return _flatten(obj, source)


def sort(documents: list[tuple[Any, str | None]], *, lenient: bool = False) -> Sorted:
    """Flatten lists, keep what fitgate reads (converted and defaulted), count the rest."""
    out = Sorted()
    names: collections.Counter[str] = collections.Counter()
    for doc, src in documents:
        for obj, source in _flatten(doc, src):
            _one(obj, source, lenient, out, names)
    return out


def one(obj: Any, source: str | None = None, *, lenient: bool = False,
        names: collections.Counter[str] | None = None, into: Sorted | None = None
        ) -> Sorted:
    """One object (not a List), read as `sort` reads it: in `objects` (converted and
    defaulted) or `skipped`, with its warnings and problems. `names` numbers objects that
    only have a generateName (pass the same counter for every object of one input).
    `into` is a Sorted to add to (and return) instead of a new one: a caller reading
    objects one by one takes them out as they come and spares a Sorted per object."""
    out = Sorted() if into is None else into
    _one(obj, source, lenient, out, names if names is not None else collections.Counter())
    return out


def _describe(obj: Any) -> str:
    return kube.describe(obj, "object")


def _one(obj: Any, source: str | None, lenient: bool, out: Sorted,
         names: collections.Counter[str]) -> None:
    def problem(path: str, message: str) -> None:
        out.problems.append(errors.FieldError(_describe(obj), path, message, source))

    if type(obj) is not dict and not isinstance(obj, Mapping):
        out.problems.append(errors.FieldError("object", "", f"must be an object, got "
                                              f"{type(obj).__name__}", source))
        return
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    model: Any = _MODELS.get((api_version, kind), _UNREAD) if type(kind) is str and type(
        api_version) is str else _UNREAD
    if model is _UNREAD:
        model = _model(obj, kind, api_version, source, out, problem)
        if model is _UNREAD:
            return
    if model is not None:
        for path in schema.unknown_fields(obj, model):
            message = f"unknown field {path.rsplit('.', 1)[-1]!r}"
            if lenient:
                out.warnings.append(f"{source + ': ' if source else ''}{_describe(obj)}: "
                                    f"{path}: {message} (ignored: --lenient)")
            else:
                problem(path, message + " (the API server refuses it under strict field "
                                        "validation; --lenient ignores it)")
    converted = normalize(obj, names)
    out.objects.append((converted, source))


#: (apiVersion, kind) fitgate reads -> its schema model (None: no schema), filled by
#: `_model` as kinds are met: most objects of an inventory are of a handful of kinds.
_MODELS: dict[tuple[str, str], str | None] = {}
_UNREAD = object()  # `_model`: the object is skipped or has a problem


def _model(obj: Mapping[str, Any], kind: Any, api_version: Any, source: str | None,
           out: Sorted, problem: Callable[[str, str], None]) -> Any:
    """The schema model of a kind fitgate reads (None: no schema), or _UNREAD for an object
    skipped (counted in `out`) or with a problem (reported)."""
    if not isinstance(kind, str) or not kind:
        problem("kind", "required field is missing")
        return _UNREAD
    if not isinstance(api_version, str) or not api_version:
        problem("apiVersion", "required field is missing")
        return _UNREAD
    group, version = split_version(api_version)
    served = READ.get((group, kind))
    if served is None:
        if group in GROUPS and not schema.is_known_kind(kind):
            readable = sorted(k for g, k in READ if g == group)
            problem("kind", f"unknown kind {kind!r} in {api_version}; fitgate reads "
                            f"{', '.join(readable)} there")
        else:
            out.skipped[f"{api_version} {kind}"] += 1
            if group == "scheduling.k8s.io" and kind in ("Workload", "PodGroup"):
                out.warnings.append(
                    f"{source + ': ' if source else ''}{_describe(obj)}: not read (a named "
                    "limitation): fitgate reads gangs from Kueue Workloads and Jobs, not from "
                    "scheduling.k8s.io Workloads or PodGroups")
        return _UNREAD
    if version not in served:
        versions = ", ".join(f"{group}/{v}" if group else v for v in served)
        problem("apiVersion", f"{kind} is read in {versions}, not {api_version}")
        return _UNREAD
    api_version_kind = _SCHEMA_ALIAS.get(f"{api_version}/{kind}", (api_version, kind))
    model = schema.model_for(*api_version_kind)
    if type(kind) is str and type(api_version) is str:
        _MODELS[(api_version, kind)] = model
    return model


# ---------------------------------------------------------------- convert, default


def normalize(obj: Mapping[str, Any], names: collections.Counter[str] | None = None
              ) -> dict[str, Any]:
    """A copy of `obj` converted to the version fitcore parses and defaulted as the API
    server would (the input is left alone). When nothing changes (a v1 object with its
    name, nothing to default: what a watch delivers), the copy is shallow: deep-copying
    every object an inventory reads would cost as much as parsing it."""
    if not _changes(obj):
        return dict(obj)
    out = copy.deepcopy(dict(obj))
    group, version = split_version(str(out.get("apiVersion", "")))
    kind = out.get("kind")
    _generate_name(out, names)
    if group == "resource.k8s.io" and version != "v1":
        _to_v1(out, version)
    if kind == "Node":
        _node_defaults(out)
    elif kind == "Pod":
        _pod_defaults(out.get("spec"))
    elif kind == "Job":
        _pod_defaults(_at(out, "spec", "template", "spec"))
    elif kind == "Workload":
        pod_sets = _at(out, "spec", "podSets")
        for ps in pod_sets if isinstance(pod_sets, list) else ():
            _pod_defaults(_at(ps, "template", "spec"))
    return out


def _changes(obj: Mapping[str, Any]) -> bool:
    """Whether `normalize` would change anything (conservative: True when unsure)."""
    meta = obj.get("metadata")
    if not (type(meta) is dict or isinstance(meta, Mapping)) or not meta.get("name"):
        return True
    api_version = obj.get("apiVersion", "")
    if api_version == "resource.k8s.io/v1":  # most objects of an inventory: its slices
        return False
    group, version = split_version(str(api_version))
    if group == "resource.k8s.io":
        return version != "v1"
    kind = obj.get("kind")
    if kind == "Node":
        status = obj.get("status")
        return (type(status) is dict or isinstance(status, Mapping)) and (
            "allocatable" not in status)
    if kind == "Pod":
        return _limits_default(obj.get("spec"))
    return kind in ("Job", "Workload")


def _limits_default(spec: Any) -> bool:
    """Whether some limit of the pod spec stands in for a missing request."""
    if type(spec) is not dict and not isinstance(spec, Mapping):
        return True
    resources = [spec.get("resources")]
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if isinstance(items, list):
            resources += [c.get("resources") if type(c) is dict or isinstance(c, Mapping)
                          else None for c in items]
        elif items is not None:
            return True
    for res in resources:
        if res is None:
            continue
        if type(res) is not dict and not isinstance(res, Mapping):
            return True
        limits = res.get("limits")
        if limits is None:
            continue
        requests = res.get("requests")
        if not isinstance(limits, Mapping) or not isinstance(requests, Mapping) or any(
                k not in requests for k in limits):
            return True
    return False


def _at(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def _generate_name(obj: dict[str, Any], names: collections.Counter[str] | None) -> None:
    """metadata.generateName → a name, as the API server does (with a suffix derived
    from the object, so that runs agree, and from a counter, so that copies differ)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") or not isinstance(
            meta.get("generateName"), str) or not meta["generateName"]:
        return
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode())
    base = meta["generateName"] + digest.hexdigest()[:5]
    n = names[base] if names is not None else 0
    if names is not None:
        names[base] += 1
    meta["name"] = base if n == 0 else f"{base}-{n}"


def _node_defaults(obj: dict[str, Any]) -> None:
    status = obj.get("status")
    if isinstance(status, dict) and "allocatable" not in status and isinstance(
            status.get("capacity"), Mapping):
        status["allocatable"] = dict(status["capacity"])


def _pod_defaults(spec: Any) -> None:
    """Container limits stand in for missing requests (core/v1 defaulting); so do
    pod-level limits for missing pod-level requests."""
    if not isinstance(spec, dict):
        return
    containers: list[Any] = []
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            containers.extend(spec[key])
    for res in [c.get("resources") for c in containers if isinstance(c, dict)] + [
            spec.get("resources")]:
        if not isinstance(res, dict) or not isinstance(res.get("limits"), Mapping):
            continue
        requests = res.get("requests")
        if requests is None:
            requests = res["requests"] = {}
        if isinstance(requests, dict):
            for k, v in res["limits"].items():
                requests.setdefault(k, v)


# -------------------------------------------------------------- resource.k8s.io


def _to_v1(obj: dict[str, Any], version: str) -> None:
    """resource.k8s.io v1beta1 / v1beta2 → v1. v1beta2 has the v1 fields; v1beta1 nests a
    device's fields under `basic` and a request's under nothing (v1: `exactly`)."""
    obj["apiVersion"] = "resource.k8s.io/v1"
    if version != "v1beta1":
        return
    kind = obj.get("kind")
    if kind == "ResourceSlice":
        devices = _at(obj, "spec", "devices")
        for i, d in enumerate(devices if isinstance(devices, list) else ()):
            if isinstance(d, dict) and isinstance(d.get("basic"), Mapping):
                basic = d.pop("basic")
                devices[i] = {**basic, **d}
    elif kind == "ResourceClaim":
        _claim_spec_to_v1(obj.get("spec"))
    elif kind == "ResourceClaimTemplate":
        _claim_spec_to_v1(_at(obj, "spec", "spec"))


_EXACT_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess",
                 "tolerations", "capacity")


def _claim_spec_to_v1(spec: Any) -> None:
    requests = _at(spec, "devices", "requests")
    for r in requests if isinstance(requests, list) else ():
        if not isinstance(r, dict) or r.get("firstAvailable"):
            continue
        exact = {k: r.pop(k) for k in _EXACT_FIELDS if k in r}
        if exact:
            r["exactly"] = exact
