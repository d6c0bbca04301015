"""An in-memory `client.Client` for unit tests: the project's own fake of its own wrapper.

It keeps objects per kind with resourceVersions, uids and generations, replays watch events
from a resourceVersion, raises `Gone` for a resourceVersion older than its compacted
history, checks every call against `rbac.PERMISSIONS`, records the calls, and can be told
to fail the next calls (an API outage). Server-side apply is approximated: the applied
object is merged into the stored one, and lists whose items carry a `name` are merged by
name (as the API's `listType=map` lists keyed by name are), which is what fitgate applies
(`status.admissionChecks` of a Workload, conditions). It is not an API server: no
admission, no defaulting, no field validation.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import random
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from admission.kube import client, errors, kinds, rbac

Key = tuple[str, str]  # (namespace or "", name)


@dataclasses.dataclass(frozen=True)
class Call:
    verb: str
    kind: str
    namespace: str | None
    name: str | None
    subresource: str | None = None
    body: Any = None


def _selector(label_selector: str | None) -> dict[str, str | None]:
    """Equality and existence label selectors (`a=b,c`), what fitgate uses; None: the
    label exists with any value."""
    if not label_selector:
        return {}
    parts = (p.split("=", 1) for p in label_selector.split(","))
    return {p[0]: (p[1] if len(p) == 2 else None) for p in parts}


def _matches(obj: Mapping[str, Any], want: Mapping[str, str | None]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(k in labels if v is None else labels.get(k) == v for k, v in want.items())


def _fields_match(obj: Mapping[str, Any], field_selector: str | None) -> bool:
    """Equality field selectors (`regarding.name=x,reason=y`), what fitgate uses."""
    for term in (field_selector or "").split(","):
        if not term:
            continue
        path, _, want = term.partition("=")
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if str(value if value is not None else "") != want:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _apply_merge(target: Any, applied: Any) -> Any:
    if isinstance(applied, Mapping) and isinstance(target, Mapping):
        out = dict(target)
        for k, v in applied.items():
            out[k] = _apply_merge(target.get(k), v)
        return out
    if isinstance(applied, list) and isinstance(target, list):
        # listType=map lists: admission checks by name, conditions by type.
        for key in ("name", "type"):
            if all(isinstance(i, Mapping) and key in i for i in applied + target):
                merged = {i[key]: i for i in target}
                for item in applied:
                    merged[item[key]] = _apply_merge(merged.get(item[key]), item)
                return list(merged.values())  # insertion order: old items, then new
    return copy.deepcopy(applied)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise errors.ApiError(422, "Invalid", f"JSON patch path {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Any, ops: list[Mapping[str, Any]]) -> Any:
    """RFC 6902 add, remove, replace and test (what fitgate sends)."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = _pointer(op["path"])
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        try:
            if kind == "test":
                have = parent[int(last)] if isinstance(parent, list) else parent[last]
                if have != op["value"]:
                    raise errors.ApiError(422, "Invalid", f"test failed at {op['path']}")
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind in ("add", "replace"):
                if isinstance(parent, list):
                    if last == "-":
                        parent.append(copy.deepcopy(op["value"]))
                    elif kind == "add":
                        parent.insert(int(last), copy.deepcopy(op["value"]))
                    else:
                        parent[int(last)] = copy.deepcopy(op["value"])
                else:
                    if kind == "replace" and last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op["value"])
            else:
                raise errors.ApiError(422, "Invalid", f"unsupported JSON patch op {kind!r}")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise errors.ApiError(422, "Invalid",
                                  f"JSON patch {kind} at {op['path']} failed: {exc}") from exc
    return doc


class FakeClient:
    """In-memory objects, watch events and injected failures; see the module docstring."""

    def __init__(self, *, history: int = 10_000,
                 permissions: rbac.Table | None = None
                 ) -> None:
        #: The RBAC table calls are checked against (default: `fitgate serve`'s).
        self.permissions = permissions
        self._objects: dict[str, dict[Key, client.Obj]] = {k.kind: {} for k in kinds.ALL}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._history: list[tuple[int, str, client.WatchEvent]] = []
        self._history_limit = history
        self._compacted = 0
        self._watchers: list[tuple[kinds.Kind, str | None, asyncio.Queue[Any]]] = []
        self._failures: list[tuple[str | None, str | None, errors.ApiError]] = []
        self.calls: list[Call] = []
        #: The creationTimestamp the server stamps on objects created from now on.
        self.creation_time = "2026-01-01T00:00:00Z"
        #: What GET /version answers (`version`).
        self.server_version: client.Obj = {"major": "1", "minor": "37",
                                           "gitVersion": "v1.37.2"}

    # ------------------------------------------------------------------ test controls

    def seed(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> client.Obj:
        """Store an object as if it had been created or replaced (no call recorded, no RBAC
        check): the way a test puts the world in place, or changes it behind fitgate."""
        body = copy.deepcopy(dict(obj))
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", "") if kind.namespaced else "", meta.get("name", ""))
        return self._store(kind, body,
                           "MODIFIED" if key in self._objects[kind.kind] else "ADDED")

    def remove(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> None:
        """Delete an object behind fitgate's back (no call recorded)."""
        key = (namespace or "" if kind.namespaced else "", name)
        old = self._objects[kind.kind].pop(key)
        rv = next(self._rv)
        self._last_rv = rv
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(rv)
        self._publish(kind, rv, client.WatchEvent("DELETED", gone))

    def fail_next(self, error: errors.ApiError, *, verb: str | None = None,
                  kind: kinds.Kind | None = None, times: int = 1) -> None:
        """The next `times` calls matching verb and kind raise `error`."""
        for _ in range(times):
            self._failures.append((verb, kind.kind if kind else None, error))

    def clear_failures(self) -> None:
        """Forget failures still pending from `fail_next` (the outage is over)."""
        self._failures.clear()

    def compact(self) -> None:
        """Forget the watch history: a watch from an older resourceVersion gets Gone."""
        self._compacted = self._last_rv
        self._history.clear()

    def close_watches(self) -> None:
        """End every open watch, as a server does when its watch timeout passes."""
        for _, _, q in self._watchers:
            q.put_nowait(None)
        self._watchers.clear()

    def objects(self, kind: kinds.Kind) -> list[client.Obj]:
        return [copy.deepcopy(o) for o in self._objects[kind.kind].values()]

    def find(self, kind: kinds.Kind, name: str, namespace: str | None = None
             ) -> client.Obj | None:
        o = self._objects[kind.kind].get((namespace or "", name))
        return copy.deepcopy(o) if o is not None else None

    def verbs(self, verb: str, kind: kinds.Kind | None = None) -> list[Call]:
        return [c for c in self.calls
                if c.verb == verb and (kind is None or c.kind == kind.kind)]

    # ------------------------------------------------------------------ internals

    def _enter(self, verb: str, kind: kinds.Kind, namespace: str | None, name: str | None,
               subresource: str | None = None, body: Any = None) -> None:
        rbac.check(kind, verb, subresource, self.permissions)
        self.calls.append(Call(verb, kind.kind, namespace, name, subresource,
                               copy.deepcopy(body)))
        for i, (v, k, err) in enumerate(self._failures):
            if (v is None or v == verb) and (k is None or k == kind.kind):
                del self._failures[i]
                raise err

    def _key(self, kind: kinds.Kind, name: str, namespace: str | None) -> Key:
        if kind.namespaced and not namespace:
            raise errors.ApiError(400, "BadRequest", f"{kind.kind} {name} needs a namespace")
        return (namespace or "" if kind.namespaced else "", name)

    def _store(self, kind: kinds.Kind, obj: client.Obj, event: str) -> client.Obj:
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", "") if kind.namespaced else "", meta["name"])
        old = self._objects[kind.kind].get(key)
        if event == "ADDED":
            meta.setdefault("uid", _uid())
            meta.setdefault("creationTimestamp", self.creation_time)
            meta["generation"] = 1
        elif old is not None:
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            gen = old["metadata"].get("generation", 1)
            changed = {k: v for k, v in obj.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")}
            meta["generation"] = gen + 1 if changed else gen
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        rv = next(self._rv)
        self._last_rv = rv
        meta["resourceVersion"] = str(rv)
        self._objects[kind.kind][key] = obj
        self._publish(kind, rv, client.WatchEvent(event, copy.deepcopy(obj)))  # type: ignore[arg-type]
        return copy.deepcopy(obj)

    def _publish(self, kind: kinds.Kind, rv: int, ev: client.WatchEvent) -> None:
        self._history.append((rv, kind.kind, ev))
        if len(self._history) > self._history_limit:
            dropped = self._history.pop(0)
            self._compacted = dropped[0]
        ns = ev.object.get("metadata", {}).get("namespace")
        for k, want_ns, q in self._watchers:
            if k.kind == kind.kind and (want_ns is None or want_ns == ns):
                q.put_nowait(ev)

    # ------------------------------------------------------------------ Client

    async def close(self) -> None:
        """As `ApiClient.close` (nothing to release)."""

    async def version(self) -> client.Obj:
        for i, (v, k, err) in enumerate(self._failures):
            if v in (None, "version") and k is None:
                del self._failures[i]
                raise err
        self.calls.append(Call("version", "", None, None, None, None))
        return copy.deepcopy(self.server_version)

    async def get(self, kind: kinds.Kind, name: str, namespace: str | None = None
                  ) -> client.Obj:
        self._enter("get", kind, namespace, name)
        o = self._objects[kind.kind].get(self._key(kind, name, namespace))
        if o is None:
            raise errors.NotFound(f"{kind.plural} {name!r} not found")
        return copy.deepcopy(o)

    async def list(self, kind: kinds.Kind, namespace: str | None = None,
                   label_selector: str | None = None,
                   field_selector: str | None = None, *,
                   each: Callable[[client.Obj], client.Obj] | None = None) -> client.Listing:
        self._enter("list", kind, namespace, None)
        want = _selector(label_selector)
        # One copy at a time, as the real client reads a page at a time.
        items = [copy.deepcopy(o) if each is None else each(copy.deepcopy(o))
                 for (ns, _), o in sorted(self._objects[kind.kind].items())
                 if (namespace is None or ns == namespace) and _matches(o, want)
                 and _fields_match(o, field_selector)]
        return client.Listing(items, str(self._last_rv))

    async def watch(self, kind: kinds.Kind, resource_version: str,
                    namespace: str | None = None, label_selector: str | None = None
                    ) -> AsyncIterator[client.WatchEvent]:
        self._enter("watch", kind, namespace, None)
        since = int(resource_version or 0)
        if since < self._compacted:
            raise errors.Gone(f"too old resource version: {since} ({self._compacted})")
        want = _selector(label_selector)
        q: asyncio.Queue[Any] = asyncio.Queue()
        for rv, k, ev in self._history:
            ns = ev.object.get("metadata", {}).get("namespace")
            if rv > since and k == kind.kind and (namespace is None or ns == namespace):
                q.put_nowait(ev)
        entry = (kind, namespace, q)
        self._watchers.append(entry)
        try:
            while True:
                ev = await q.get()
                if ev is None:
                    return
                if _matches(ev.object, want):
                    yield ev
        finally:
            if entry in self._watchers:
                self._watchers.remove(entry)

    async def create(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> client.Obj:
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + f"{random.getrandbits(20):05x}"
        self._enter("create", kind, meta.get("namespace"), meta.get("name"), body=body)
        key = self._key(kind, meta["name"], meta.get("namespace"))
        if key in self._objects[kind.kind]:
            raise errors.AlreadyExists(f"{kind.plural} {meta['name']!r} already exists")
        return self._store(kind, body, "ADDED")

    async def patch(self, kind: kinds.Kind, name: str, patch: Any, *,
                    namespace: str | None = None, patch_type: client.PatchType = "merge",
                    subresource: str | None = None) -> client.Obj:
        self._enter("patch", kind, namespace, name, subresource, patch)
        key = self._key(kind, name, namespace)
        old = self._objects[kind.kind].get(key)
        if old is None:
            raise errors.NotFound(f"{kind.plural} {name!r} not found")
        if patch_type == "json":
            new = json_patch(old, list(patch))
        else:
            want_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(
                patch, Mapping) else None
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise errors.Conflict(f"{kind.plural} {name!r}: the object has been modified")
            new = merge_patch(old, patch)
        new["metadata"]["name"] = name
        return self._store(kind, new, "MODIFIED")

    async def apply(self, kind: kinds.Kind, obj: Mapping[str, Any], *, field_manager: str,
                    subresource: str | None = None, force: bool = False) -> client.Obj:
        meta = obj.get("metadata") or {}
        self._enter("patch", kind, meta.get("namespace"), meta.get("name"), subresource,
                    {"apply": obj, "fieldManager": field_manager})
        key = self._key(kind, meta["name"], meta.get("namespace"))
        old = self._objects[kind.kind].get(key)
        if old is None:
            if subresource:
                raise errors.NotFound(f"{kind.plural} {meta['name']!r} not found")
            return self._store(kind, copy.deepcopy(dict(obj)), "ADDED")
        applied = copy.deepcopy(dict(obj))
        want_rv = applied.get("metadata", {}).pop("resourceVersion", None)
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{kind.plural} {meta['name']!r}: the object has been "
                                  "modified")
        return self._store(kind, _apply_merge(old, applied), "MODIFIED")

    async def update(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> client.Obj:
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        self._enter("update", kind, meta.get("namespace"), meta.get("name"), body=body)
        key = self._key(kind, meta["name"], meta.get("namespace"))
        old = self._objects[kind.kind].get(key)
        if old is None:
            raise errors.NotFound(f"{kind.plural} {meta['name']!r} not found")
        if meta.get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{kind.plural} {meta['name']!r}: the object has been "
                                  "modified")
        return self._store(kind, body, "MODIFIED")

    async def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None, *,
                     precondition_uid: str | None = None) -> None:
        self._enter("delete", kind, namespace, name)
        key = self._key(kind, name, namespace)
        old = self._objects[kind.kind].get(key)
        if old is None:
            raise errors.NotFound(f"{kind.plural} {name!r} not found")
        if precondition_uid and old["metadata"]["uid"] != precondition_uid:
            raise errors.Conflict(f"{kind.plural} {name!r}: uid precondition failed")
        del self._objects[kind.kind][key]
        rv = next(self._rv)
        self._last_rv = rv
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(rv)
        self._publish(kind, rv, client.WatchEvent("DELETED", gone))


if TYPE_CHECKING:  # FakeClient implements the protocol (checked by mypy)
    _: client.Client = FakeClient()


def _uid() -> str:
    """A random version-4 UUID, from the random module: no read of the OS's random
    source per object (benchmarks create thousands a second on the event loop)."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))
