"""A small reader of CRD structural schemas for tests: validation as the API server does
for the keywords our CRDs use, pruning of unknown fields, and defaulting."""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import yaml

CRDS = pathlib.Path(__file__).resolve().parents[2] / "charts" / "fitgate" / "crds"


def load(name: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((CRDS / f"{name}.yaml").read_text())
    return crd


def schema(crd: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
          "integer": int, "number": (int, float)}


def check(s: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Problems (validation errors, and fields the API server would prune)."""
    out: list[str] = []
    if s.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return [f"{path}: must be an integer or a string"]
        if isinstance(value, str) and "pattern" in s and not re.match(s["pattern"], value):
            out.append(f"{path}: {value!r} does not match {s['pattern']}")
        return out
    t = s.get("type")
    if t is not None:
        py = _TYPES[t]
        if (isinstance(value, bool) and t in ("integer", "number")) or not isinstance(value, py):
            return [f"{path}: must be {t}, got {type(value).__name__}"]
    if "enum" in s and value not in s["enum"]:
        out.append(f"{path}: {value!r} not in {s['enum']}")
    if "minimum" in s and value < s["minimum"]:
        out.append(f"{path}: below minimum {s['minimum']}")
    if isinstance(value, str):
        if len(value) > s.get("maxLength", 1 << 30) or len(value) < s.get("minLength", 0):
            out.append(f"{path}: length out of bounds")
        if "pattern" in s and not re.match(s["pattern"], value):
            out.append(f"{path}: {value!r} does not match pattern")
    if isinstance(value, list):
        if len(value) > s.get("maxItems", 1 << 30):
            out.append(f"{path}: too many items")
        for i, item in enumerate(value):
            out += check(s.get("items", {}), item, f"{path}[{i}]")
    if isinstance(value, dict):
        if len(value) > s.get("maxProperties", 1 << 30) or \
                len(value) < s.get("minProperties", 0):
            out.append(f"{path}: property count out of bounds")
        for r in s.get("required", []):
            if r not in value:
                out.append(f"{path}.{r}: required")
        props = s.get("properties", {})
        extra = s.get("additionalProperties")
        for k, v in value.items():
            if k in props:
                out += check(props[k], v, f"{path}.{k}")
            elif isinstance(extra, dict):
                out += check(extra, v, f"{path}[{k}]")
            elif path != ".metadata" and not s.get("x-kubernetes-preserve-unknown-fields"):
                out.append(f"{path}.{k}: unknown field (pruned)")
    return out


def defaulted(s: dict[str, Any], value: Any) -> Any:
    """The value with the schema's defaults filled in (as the API server stores it)."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for k, ps in s.get("properties", {}).items():
            if k not in value and "default" in ps:
                value[k] = copy.deepcopy(ps["default"])
            if k in value:
                value[k] = defaulted(ps, value[k])
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            for k in list(value):
                if k not in s.get("properties", {}):
                    value[k] = defaulted(extra, value[k])
    elif isinstance(value, list):
        value = [defaulted(s.get("items", {}), v) for v in value]
    return value


def has_path(s: dict[str, Any], json_path: str) -> bool:
    """Whether a printer column's `.a.b.c` names a property of the schema."""
    node = s
    json_path = re.sub(r"\[\?\(.*?\)\]", "", json_path)  # a filter picks list items
    for part in json_path.strip(".").split("."):
        if node.get("type") == "array":
            node = node.get("items", {})
        props = node.get("properties", {})
        if part not in props:
            return False
        node = props[part]
    return True
