"""`fitgate shape check FILE...`: lint NodeShapes offline, before they reach a cluster.

Four checks per NodeShape, each finding naming the file, the shape and the field:

- the CRD's schema (`charts/fitgate/crds/nodeshapes.fitgate.io.yaml`, shipped in this
  package as `nodeshapes.crd.yaml`): types, patterns, bounds, required and unknown fields
  (`kubectl apply` validates fields strictly), list-map keys, and the CEL rules
  (`x-kubernetes-validations`), what the API server would refuse;
- what fitgate's engine refuses: the shape is applied to a `fitcore.Inventory` as the
  service's inventory applies a NodeShape event, and each of its field errors is a finding
  (the service drops such a shape);
- device names used twice in one pool (the API server only sees duplicates within one
  slice);
- device attributes that hold one device's identity (UUIDs, serials, MAC addresses:
  `admission.app.shapes.identity_reason`): a new node never has them, so verification
  would call every new node a mismatch. PCI bus addresses are not findings here: identical
  machines usually share them, which only comparing live nodes tells
  (`fitgate shape capture` does).

Exit status (cli.py): 0 without findings, 1 with findings, 2 when a file cannot be read
or is not YAML.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

import fitcore
from admission.app import shapes

#: The NodeShape CRD, shipped with the package (a link to the chart's CRD in the source).
CRD_FILE = pathlib.Path(__file__).with_name("nodeshapes.crd.yaml")

_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool,
                          "integer": int, "number": (int, float)}


@dataclasses.dataclass(frozen=True)
class Finding:
    source: str  # the file
    shape: str  # "NodeShape name", or what the object is
    field: str  # e.g. spec.resourceSlices[0].devices[2].name
    message: str

    def __str__(self) -> str:
        field = f": {self.field}" if self.field else ""
        return f"{self.source}: {self.shape}{field}: {self.message}"


class Unreadable(Exception):
    """A file that cannot be read, or is not YAML."""


# ------------------------------------------------------------------ the CRD's schema


@functools.cache
def crd_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the NodeShape CRD's served version."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def _cel_env() -> Any:
    from cel_expr_python import cel

    return cel.NewEnv(variables={"self": cel.Type.DYN})


@functools.cache
def _cel_program(rule: str) -> Any:
    return _cel_env().compile(rule)


def _rule_holds(rule: str, value: Any) -> bool:
    env = _cel_env()
    result = _cel_program(rule).eval(env.Activation({"self": value}))
    return bool(result.value())


def _type_ok(s: Mapping[str, Any], value: Any) -> str | None:
    if s.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return "must be an integer or a string"
        return None
    t = s.get("type")
    if t is None:
        return None
    if (isinstance(value, bool) and t in ("integer", "number")) or \
            not isinstance(value, _TYPES[t]):
        return f"must be {'an' if t[0] in 'aeiou' else 'a'} {t}, not {type(value).__name__}"
    return None


def _scalar(s: Mapping[str, Any], value: Any) -> Iterator[str]:
    if "enum" in s and value not in s["enum"]:
        yield f"{value!r} is not one of {', '.join(map(str, s['enum']))}"
    if "minimum" in s and isinstance(value, int) and value < s["minimum"]:
        yield f"{value} is less than the minimum {s['minimum']}"
    if isinstance(value, str):
        if len(value) > s.get("maxLength", len(value)):
            yield f"longer than {s['maxLength']} characters"
        if len(value) < s.get("minLength", 0):
            yield f"shorter than {s['minLength']} characters"
        if "pattern" in s and not re.search(s["pattern"], value):
            yield f"{value!r} does not match the pattern the CRD gives this field"


def _list(s: Mapping[str, Any], value: list[Any], path: str) -> Iterator[tuple[str, str]]:
    if len(value) > s.get("maxItems", len(value)):
        yield path, f"more than {s['maxItems']} items"
    keys = s.get("x-kubernetes-list-map-keys") or []
    seen: dict[tuple[Any, ...], int] = {}
    for i, item in enumerate(value):
        yield from schema_errors(s.get("items") or {}, item, f"{path}[{i}]")
        if s.get("x-kubernetes-list-type") == "map" and isinstance(item, Mapping):
            key = tuple(item.get(k) for k in keys)
            if key in seen:
                yield (f"{path}[{i}]", f"duplicate {'/'.join(keys)} {'/'.join(map(str, key))}"
                                       f" (also {path}[{seen[key]}])")
            seen.setdefault(key, i)


def _object(s: Mapping[str, Any], value: Mapping[str, Any], path: str
            ) -> Iterator[tuple[str, str]]:
    if not s.get("minProperties", 0) <= len(value) <= s.get("maxProperties", len(value)):
        yield path, (f"holds {len(value)} entries, allowed {s.get('minProperties', 0)} to "
                     f"{s.get('maxProperties', 'any')}")
    for r in s.get("required") or []:
        if r not in value:
            yield f"{path}.{r}".lstrip("."), "required"
    props = s.get("properties") or {}
    extra = s.get("additionalProperties")
    for k, v in value.items():
        if k in props:
            yield from schema_errors(props[k], v, f"{path}.{k}".lstrip("."))
        elif isinstance(extra, Mapping):
            yield from schema_errors(extra, v, f"{path}[{k}]")
        elif not s.get("x-kubernetes-preserve-unknown-fields") and path != "metadata":
            yield f"{path}.{k}".lstrip("."), "unknown field"


def schema_errors(s: Mapping[str, Any], value: Any, path: str = ""
                  ) -> Iterator[tuple[str, str]]:
    """(field, message) for every way `value` breaks the structural schema `s`, the
    keywords the NodeShape CRD uses."""
    wrong = _type_ok(s, value)
    if wrong:
        yield path, wrong
        return
    for message in _scalar(s, value):
        yield path, message
    if isinstance(value, list):
        yield from _list(s, value, path)
    elif isinstance(value, Mapping):
        yield from _object(s, value, path)
    for v in s.get("x-kubernetes-validations") or []:
        try:
            holds = _rule_holds(v["rule"], value)
        except Exception as exc:  # a rule the CEL library cannot evaluate
            yield path, f"rule {v['rule']!r} could not be evaluated: {exc}"
            continue
        if not holds:
            yield path, str(v.get("message") or f"fails the rule {v['rule']}")


# ------------------------------------------------------------------ one shape


def _engine_errors(obj: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    try:
        fitcore.Inventory().apply("ADDED", obj)
    except fitcore.InputError as exc:
        for e in exc.errors:
            yield e.path, f"fitgate refuses it: {e.message}"


def _device_errors(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Device names used twice in one pool; attributes that look per node."""
    seen: dict[tuple[str, str, str], str] = {}
    identities: dict[str, tuple[str, str, int]] = {}  # attribute -> (first path, why, count)
    slices = spec.get("resourceSlices")
    for i, s in enumerate(slices if isinstance(slices, list) else []):
        if not isinstance(s, Mapping):
            continue
        driver = str(s.get("driver"))
        pool = s.get("pool")
        pool_name = str(pool.get("name")) if isinstance(pool, Mapping) else f"#{i}"
        devices = s.get("devices")
        for j, dev in enumerate(devices if isinstance(devices, list) else []):
            if not isinstance(dev, Mapping):
                continue
            path = f"spec.resourceSlices[{i}].devices[{j}]"
            key = (driver, pool_name, str(dev.get("name")))
            if key in seen and not seen[key].startswith(f"spec.resourceSlices[{i}]."):
                yield f"{path}.name", (f"device {key[2]!r} of pool {pool_name} of {driver} is "
                                       f"also {seen[key]}")
            seen.setdefault(key, path)
            attributes = dev.get("attributes")
            for a, v in (attributes.items() if isinstance(attributes, Mapping) else []):
                why = shapes.identity_reason(shapes.qualified(driver, a),
                                             shapes.attribute_value(v))
                if why:
                    first, first_why, n = identities.get(a, (f"{path}.attributes[{a}]", why, 0))
                    identities[a] = (first, first_why, n + 1)
    for a, (path, why, n) in identities.items():
        on = f" (on {n} devices)" if n > 1 else ""
        yield path, (f"looks unique per node{on}: {why}; every new node would differ from "
                     f"the shape, and verification would call it a mismatch (leave {a} out)")


def check_shape(obj: Any, source: str) -> list[Finding]:
    """Every finding about one object of a file."""
    if not isinstance(obj, Mapping) or obj.get("kind") != "NodeShape":
        what = obj.get("kind") if isinstance(obj, Mapping) else type(obj).__name__
        return [Finding(source, "object", "kind", f"not a NodeShape ({what})")]
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"),
                                                                 Mapping) else None
    label = f"NodeShape {name}" if name else "NodeShape"
    out = [Finding(source, label, f, m) for f, m in schema_errors(crd_schema(), obj)]
    if obj.get("apiVersion") != shapes.SHAPE_API_VERSION:
        out.append(Finding(source, label, "apiVersion",
                           f"{obj.get('apiVersion')!r}; expected {shapes.SHAPE_API_VERSION}"))
    out += [Finding(source, label, f, m) for f, m in _engine_errors(obj)]
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        out += [Finding(source, label, f, m) for f, m in _device_errors(spec)]
    return out


# ------------------------------------------------------------------ files


def _files(path: str) -> list[pathlib.Path]:
    p = pathlib.Path(path)
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml", ".json"))
    return [p]


def check_files(paths: list[str]) -> list[Finding]:
    """Findings of every NodeShape in the files (directories: their YAML and JSON files).
    Raises Unreadable for a file that cannot be read or is not YAML."""
    out: list[Finding] = []
    for path in paths:
        for f in _files(path):
            try:
                docs = fitcore.load_yaml(f.read_text())
            except (OSError, UnicodeDecodeError) as exc:
                raise Unreadable(f"{f}: cannot read: {exc}") from exc
            except (yaml.YAMLError, fitcore.LimitError) as exc:
                raise Unreadable(f"{f}: not YAML: {exc}") from exc
            for doc in docs:
                if doc is None:
                    continue
                for obj, _ in fitcore.flatten(doc, str(f)):
                    out += check_shape(obj, str(f))
    return out
