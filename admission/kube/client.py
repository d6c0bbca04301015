"""The thin client surface the rest of fitgate programs against.

`Client` is a Protocol: `ApiClient` (kubernetes_asyncio) and `fake.FakeClient` (memory)
implement it. Objects go in and come out as plain dicts. Every method raises the errors of
`admission.kube.errors`, and checks the call against `rbac.PERMISSIONS` first.

`ApiClient` uses kubernetes_asyncio's `ApiClient.call_api` directly (the raw call path:
URL, query, body) rather than the generated typed APIs or the `dynamic` client: every kind
of `kinds.py` (core, Kueue, autoscaler and fitgate CRDs) then goes through one code path
with plain dicts, needs no discovery round trip at start, and the responses are read as
JSON without a model round trip. The library still supplies what is hard to get right:
kubeconfig and in-cluster configuration (token files, client certificates, exec plugins),
TLS and the aiohttp session.

Watches: `watch` streams the API's watch response line by line with
`allowWatchBookmarks=true`; BOOKMARK events carry only a newer resourceVersion and are
passed on with type "BOOKMARK" so that a cache resumes from it (a store ignores them). An
ERROR event with code 410, or an HTTP 410, raises `Gone`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from admission.kube import errors, kinds, rbac
from admission.kube import kubeconfig as kubeconfig_

Obj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
PatchType = Literal["merge", "json", "strategic"]


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: Obj


@dataclasses.dataclass(frozen=True)
class Listing:
    items: list[Obj]
    resource_version: str


class Client(Protocol):
    """What fitgate needs from the API server, and nothing more."""

    async def get(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> Obj:
        """The object; raises NotFound."""

    async def list(self, kind: kinds.Kind, namespace: str | None = None,
                   label_selector: str | None = None,
                   field_selector: str | None = None, *,
                   each: Callable[[Obj], Obj] | None = None) -> Listing:
        """All objects of the kind (in a namespace, or all namespaces when None);
        `field_selector`: equality terms (`regarding.name=x,reason=y`); `each`: what
        is kept of each item, applied as the items arrive (a page at a time), so the
        raw listing is never held whole."""

    def watch(self, kind: kinds.Kind, resource_version: str,
              namespace: str | None = None, label_selector: str | None = None
              ) -> AsyncIterator[WatchEvent]:
        """Changes after `resource_version`; raises Gone when it is too old. The iterator
        ends when the server closes the watch (the caller watches again from the last
        resourceVersion it saw). BOOKMARK events only advance the resourceVersion."""

    async def create(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> Obj:
        """Raises AlreadyExists."""

    async def patch(self, kind: kinds.Kind, name: str, patch: Any, *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None) -> Obj:
        """Raises NotFound, or Conflict when the patch names a stale resourceVersion."""

    async def apply(self, kind: kinds.Kind, obj: Mapping[str, Any], *,
                    field_manager: str, subresource: str | None = None,
                    force: bool = False) -> Obj:
        """Server-side apply as `field_manager` (to `subresource`, e.g. "status")."""

    async def update(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> Obj:
        """Replace the object, guarded by its metadata.resourceVersion; raises NotFound,
        or Conflict when it was written since."""

    async def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None,
                     *, precondition_uid: str | None = None) -> None:
        """Raises NotFound."""

    async def version(self) -> Obj:
        """The API server's version (GET /version: major, minor, gitVersion, ...); every
        authenticated client may read it, so it is not in `rbac.PERMISSIONS`."""


# --------------------------------------------------------------------------- ApiClient

_PATCH_TYPES = {"merge": "application/merge-patch+json",
                "json": "application/json-patch+json",
                "strategic": "application/strategic-merge-patch+json"}
_APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body goes as JSON
#: The server closes a watch after this many seconds; the cache then watches again.
WATCH_TIMEOUT_SECONDS = 300


def path(kind: kinds.Kind, namespace: str | None = None, name: str | None = None,
         subresource: str | None = None) -> str:
    """The REST path of a kind, an object, or an object's subresource."""
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{kind.plural}"
    if name is not None:
        base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
    return base


def error_of(status: int, body: Any, what: str) -> errors.ApiError:
    """The `errors` exception for an HTTP status and its Status body (dict or text)."""
    reason = body.get("reason", "") if isinstance(body, Mapping) else ""
    message = (body.get("message") if isinstance(body, Mapping) else None) or (
        str(body)[:500] if body else what)
    if status == 404:
        return errors.NotFound(message)
    if status == 409:
        return errors.AlreadyExists(message) if reason == "AlreadyExists" \
            else errors.Conflict(message)
    if status == 410:
        return errors.Gone(message)
    return errors.ApiError(status, reason or "Error", message)


class ApiClient:
    """`Client` over kubernetes_asyncio (see the module docstring). Build it with
    `connect`; close it with `close`."""

    def __init__(self, api: Any, *, request_timeout: float = 30.0,
                 permissions: rbac.Table | None = None) -> None:
        self._api = api
        self._timeout = request_timeout
        #: The calls this client may make (default: `fitgate serve`'s, rbac.py).
        self.permissions = permissions

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None, *,
                      request_timeout: float = 30.0, permissions: rbac.Table | None = None,
                      in_cluster_first: bool = True) -> ApiClient:
        """In-cluster configuration when `kubeconfig` is None and the process runs in a
        pod (with `in_cluster_first=False`, as kubectl: only when $KUBECONFIG is unset
        too); otherwise the kubeconfig files chosen, checked and merged as kubectl does
        (`kubeconfig.load`, with the library's merge: `kubeconfig`, else $KUBECONFIG, else
        ~/.kube/config) and their `context` (default: the current context). Raises
        `errors.ConfigError`, naming the file and why."""
        from kubernetes_asyncio import client as k8s
        from kubernetes_asyncio import config as k8s_config

        configuration = k8s.Configuration()
        where = "the in-cluster configuration"
        try:
            if kubeconfig is None and _in_cluster() and (
                    in_cluster_first or not os.environ.get("KUBECONFIG")):
                k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration)
            else:
                loaded = kubeconfig_.load(kubeconfig, context)
                kubeconfig_.require_cluster(loaded)
                where = loaded.where
                await kubeconfig_.configure(loaded, configuration)
        except errors.ConfigError:
            raise
        except Exception as exc:  # the library's ConfigException, and what a bad file
            # makes it raise on the way (TypeError, AttributeError, yaml and OS errors)
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise errors.ConfigError(
                f"cannot use {where}: {reason or type(exc).__name__}") from exc
        return cls(k8s.ApiClient(configuration), request_timeout=request_timeout,
                   permissions=permissions)

    @property
    def host(self) -> str:
        """The API server's URL."""
        return str(getattr(getattr(self._api, "configuration", None), "host", "") or "")

    async def close(self) -> None:
        await self._api.close()

    async def _call(self, method: str, url: str, *, query: list[tuple[str, str]] | None = None,
                    body: Any = None, content_type: str | None = None,
                    timeout: Any = None, what: str = "") -> Any:
        """One request; returns the aiohttp response (status < 400) or raises."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            resp = await self._api.call_api(
                url, method, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=timeout if timeout is not None else self._timeout)
        except (TimeoutError, OSError) as exc:
            raise errors.ApiError(0, "Unreachable", f"{what}: {exc!r}") from exc
        except Exception as exc:  # aiohttp.ClientError and the library's ApiException
            status = int(getattr(exc, "status", 0) or 0)
            raise errors.ApiError(status, type(exc).__name__, f"{what}: {exc}") from exc
        if resp.status >= 400:
            try:
                text = await resp.text()
                payload: Any = json.loads(text) if text else None
            except (TimeoutError, ValueError, OSError):
                payload = None
            finally:
                resp.release()
            raise error_of(resp.status, payload, f"{method} {url}")
        return resp

    async def _json(self, method: str, url: str, **kw: Any) -> Obj:
        resp = await self._call(method, url, **kw)
        try:
            data = await resp.json(content_type=None)
        except (TimeoutError, ValueError, OSError) as exc:
            raise errors.ApiError(0, "BadResponse", f"{method} {url}: {exc!r}") from exc
        finally:
            resp.release()
        return data if isinstance(data, dict) else {}

    async def version(self) -> Obj:
        return await self._json("GET", "/version", what="get the API server's version")

    async def get(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> Obj:
        rbac.check(kind, "get", None, self.permissions)
        return await self._json("GET", path(kind, namespace, name), what=f"get {kind.kind}")

    async def list(self, kind: kinds.Kind, namespace: str | None = None,
                   label_selector: str | None = None,
                   field_selector: str | None = None, *,
                   each: Callable[[Obj], Obj] | None = None) -> Listing:
        rbac.check(kind, "list", None, self.permissions)
        items: list[Obj] = []
        query: list[tuple[str, str]] = [("limit", "500")]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        cont = ""
        while True:
            page = await self._json("GET", path(kind, namespace),
                                    query=query + ([("continue", cont)] if cont else []),
                                    what=f"list {kind.kind}")
            for item in page.get("items") or []:
                # Items of a list carry no apiVersion/kind; a watch's objects do.
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
                items.append(item if each is None else each(item))
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                return Listing(items, str(meta.get("resourceVersion") or ""))

    async def watch(self, kind: kinds.Kind, resource_version: str,
                    namespace: str | None = None, label_selector: str | None = None
                    ) -> AsyncIterator[WatchEvent]:
        import aiohttp

        rbac.check(kind, "watch", None, self.permissions)
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(WATCH_TIMEOUT_SECONDS))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        # No total timeout: only a connect bound and a read bound longer than the
        # server's own watch timeout.
        timeout = aiohttp.ClientTimeout(total=None, connect=self._timeout,
                                        sock_connect=self._timeout,
                                        sock_read=WATCH_TIMEOUT_SECONDS + 30)
        url = path(kind, namespace)
        resp = await self._call("GET", url, query=query, timeout=timeout,
                                what=f"watch {kind.kind}")
        try:
            while True:
                try:
                    line = await resp.content.readline()
                except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                    raise errors.ApiError(0, "Unreachable",
                                          f"watch {kind.kind}: {exc!r}") from exc
                if not line:
                    return
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except ValueError as exc:
                    raise errors.ApiError(0, "BadResponse",
                                          f"watch {kind.kind}: {line[:200]!r}") from exc
                etype, obj = raw.get("type"), raw.get("object") or {}
                if etype == "ERROR":
                    raise error_of(int(obj.get("code") or 0), obj, f"watch {kind.kind}")
                if etype in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                    yield WatchEvent(etype, obj)
        finally:
            resp.release()

    async def create(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> Obj:
        rbac.check(kind, "create", None, self.permissions)
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        ns = (body.get("metadata") or {}).get("namespace")
        return await self._json("POST", path(kind, ns), body=body,
                                what=f"create {kind.kind}")

    async def patch(self, kind: kinds.Kind, name: str, patch: Any, *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None) -> Obj:
        rbac.check(kind, "patch", subresource, self.permissions)
        return await self._json("PATCH", path(kind, namespace, name, subresource),
                                body=patch, content_type=_PATCH_TYPES[patch_type],
                                what=f"patch {kind.kind} {name}")

    async def apply(self, kind: kinds.Kind, obj: Mapping[str, Any], *,
                    field_manager: str, subresource: str | None = None,
                    force: bool = False) -> Obj:
        rbac.check(kind, "patch", subresource, self.permissions)
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        meta = body.get("metadata") or {}
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        return await self._json("PATCH", path(kind, meta.get("namespace"), meta["name"],
                                              subresource),
                                query=query, body=body, content_type=_APPLY,
                                what=f"apply {kind.kind} {meta['name']}")

    async def update(self, kind: kinds.Kind, obj: Mapping[str, Any]) -> Obj:
        """Replace the object (PUT), guarded by its metadata.resourceVersion: raises
        Conflict when someone wrote it since (a Lease's optimistic concurrency)."""
        rbac.check(kind, "update", None, self.permissions)
        meta = obj.get("metadata") or {}
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        return await self._json("PUT", path(kind, meta.get("namespace"), meta["name"]),
                                body=body, what=f"update {kind.kind} {meta['name']}")

    async def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None,
                     *, precondition_uid: str | None = None) -> None:
        rbac.check(kind, "delete", None, self.permissions)
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions",
                     "propagationPolicy": "Background"}
        if precondition_uid:
            body["preconditions"] = {"uid": precondition_uid}
        resp = await self._call("DELETE", path(kind, namespace, name), body=body,
                                what=f"delete {kind.kind} {name}")
        resp.release()


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token")


if TYPE_CHECKING:  # ApiClient implements the protocol (checked by mypy)
    _: Client = ApiClient(None)
