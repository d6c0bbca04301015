"""An offline structural check of rendered objects against the API's own schemas.

The schemas are the ones the API server serves: Kubernetes' OpenAPI v3 documents
(`api/openapi-spec/v3/` of the k8s.io/kubernetes module the local control plane is built
from) and the `openAPIV3Schema` of CRDs (Kueue's, cert-manager's). The check walks an
object along its schema and reports, with the field path, what a strict API server refuses:
an unknown field, a wrong type, a missing required field, a value outside an enum. It does
not run CEL rules or defaulting; `e2e/tests/test_chart.py` sends the same objects to a real
API server (`kubectl apply --dry-run=server`) for that.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _is(value: Any, type_name: str) -> bool:
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[type_name])


class Schemas:
    """Schemas by (apiVersion, kind), from Kubernetes' OpenAPI and from CRDs."""

    def __init__(self) -> None:
        self._components: dict[str, Any] = {}
        self._roots: dict[tuple[str, str], Any] = {}

    def load_openapi(self, spec_dir: pathlib.Path) -> None:
        """Every `*_openapi.json` of an `api/openapi-spec/v3` directory."""
        files = sorted(spec_dir.glob("*_openapi.json"))
        if not files:
            raise FileNotFoundError(f"{spec_dir}: no OpenAPI v3 documents")
        for f in files:
            doc = json.loads(f.read_text())
            for name, schema in doc.get("components", {}).get("schemas", {}).items():
                self._components[name] = schema
                for gvk in schema.get("x-kubernetes-group-version-kind", []):
                    group, version, kind = gvk["group"], gvk["version"], gvk["kind"]
                    api_version = f"{group}/{version}" if group else version
                    self._roots.setdefault((api_version, kind), schema)

    def load_crds(self, crds: Iterable[Mapping[str, Any]]) -> None:
        for crd in crds:
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                schema = version["schema"]["openAPIV3Schema"]
                self._roots[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = {
                    **schema, "x-crd": True}

    def knows(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self._roots

    def validate(self, obj: Mapping[str, Any]) -> list[str]:
        """Every structural error of `obj`, each with its field path; [] when valid."""
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        root = self._roots.get(key)
        if root is None:
            return [f"no schema for {key[0]} {key[1]}"]
        errors: list[str] = []
        self._walk(obj, root, "", errors, crd=bool(root.get("x-crd")))
        return errors

    # ------------------------------------------------------------------ the walk

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while True:
            if "$ref" in schema:
                schema = self._components[schema["$ref"].rsplit("/", 1)[1]]
            elif "allOf" in schema and len(schema["allOf"]) == 1 and "type" not in schema:
                schema = {**{k: v for k, v in schema.items() if k != "allOf"},
                          **schema["allOf"][0]}
            else:
                return schema

    def _walk(self, value: Any, schema: Mapping[str, Any], path: str, errors: list[str],
              crd: bool) -> None:
        schema = self._resolve(schema)
        where = path or "."
        if value is None:
            if not schema.get("nullable"):
                errors.append(f"{where}: null is not allowed")
            return
        if schema.get("x-kubernetes-int-or-string"):
            if not (_is(value, "integer") or _is(value, "string")):
                errors.append(f"{where}: {value!r} is neither an integer nor a string")
            return
        alternatives = schema.get("oneOf") or schema.get("anyOf")
        if alternatives and "type" not in schema and "properties" not in schema:
            if not any(not self._errors_of(value, alt, path, crd) for alt in alternatives):
                errors.append(f"{where}: {value!r} matches none of the allowed forms")
            return
        type_name = schema.get("type")
        if type_name and not _is(value, type_name):
            errors.append(f"{where}: {type(value).__name__} {value!r} where the schema "
                          f"wants {type_name}")
            return
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
        if isinstance(value, dict):
            self._walk_object(value, schema, path, errors, crd)
        elif isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                self._walk(item, schema["items"], f"{path}[{i}]", errors, crd)

    def _walk_object(self, value: dict[str, Any], schema: Mapping[str, Any], path: str,
                     errors: list[str], crd: bool) -> None:
        props = schema.get("properties")
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required field is missing")
        if props is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping):
                for k, v in value.items():
                    self._walk(v, extra, f"{path}.{k}", errors, crd)
            return  # a free-form object (RawExtension, preserve-unknown-fields, ...)
        for k, v in value.items():
            if k in props:
                # A CRD's embedded ObjectMeta is validated by the API server itself.
                if crd and path == "" and k == "metadata":
                    continue
                self._walk(v, props[k], f"{path}.{k}", errors, crd)
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}.{k}: unknown field")

    def _errors_of(self, value: Any, schema: Mapping[str, Any], path: str, crd: bool
                   ) -> list[str]:
        out: list[str] = []
        self._walk(value, schema, path, out, crd)
        return out
