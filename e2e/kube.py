"""A small, generic async Kubernetes client for e2e tests, over plain dicts.

Tests speak the API's own JSON (``{"apiVersion": ..., "kind": ..., ...}``), as fitcore's
``kube`` module does: no typed models, so a test reads like the manifests users write.
Requests go through ``kubernetes_asyncio``'s ApiClient (auth, TLS, kubeconfig handling);
paths come from ``RESOURCES`` (kind -> plural, namespaced).

``wait_for`` is the one way tests wait: it polls an async predicate until it returns a
truthy value, bounded by a timeout, and on timeout reports the last value it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

T = TypeVar("T")

# kind -> (plural, namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "ConfigMap": ("configmaps", True),
    "PodTemplate": ("podtemplates", True),
    "ServiceAccount": ("serviceaccounts", True),
    "Event": ("events", True),
    "Job": ("jobs", True),
    "ResourceClaim": ("resourceclaims", True),
    "ResourceClaimTemplate": ("resourceclaimtemplates", True),
    "ResourceSlice": ("resourceslices", False),
    "DeviceClass": ("deviceclasses", False),
    "Workload": ("workloads", True),  # both kueue.x-k8s.io and scheduling.k8s.io
    "PodGroup": ("podgroups", True),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
    "ResourceFlavor": ("resourceflavors", False),
    "AdmissionCheck": ("admissionchecks", False),
    "ProvisioningRequestConfig": ("provisioningrequestconfigs", False),
    "Topology": ("topologies", False),
    "FitPolicy": ("fitpolicies", False),
    "NodeShape": ("nodeshapes", False),
    "Cohort": ("cohorts", False),
    "ProvisioningRequest": ("provisioningrequests", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
}


class NotFound(LookupError):
    pass


def path_for(api_version: str, kind: str, namespace: str | None = None,
             name: str | None = None, subresource: str | None = None) -> str:
    plural, namespaced = RESOURCES.get(kind, (kind.lower() + "s", True))
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
    if subresource:
        base += f"/{subresource}"
    return base


class Kube:
    """Create, read, patch, delete and list objects as dicts."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    async def request(self, method: str, path: str, body: Any = None,
                      query: dict[str, str] | None = None,
                      content_type: str = "application/json") -> dict[str, Any]:
        try:
            resp = await self.api.call_api(
                path, method, query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body, auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=60)
        except ApiException as err:
            if err.status == 404:
                raise NotFound(f"{method} {path}: not found") from err
            raise
        data = await resp.read()
        # Without preloading, the client returns error responses instead of raising them.
        if resp.status == 404:
            raise NotFound(f"{method} {path}: not found")
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=f"{method} {path}: "
                               f"{data.decode(errors='replace')[:1000]}")
        return json.loads(data) if data else {}

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = path_for(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return await self.request("POST", path, obj)

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (creates or updates), field manager ``fitgate-e2e``."""
        meta = obj["metadata"]
        path = path_for(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        return await self.request("PATCH", path, obj,
                                  query={"fieldManager": "fitgate-e2e", "force": "true"},
                                  content_type="application/apply-patch+yaml")

    async def get(self, api_version: str, kind: str, name: str,
                  namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path_for(api_version, kind, namespace, name))
        except NotFound:
            return None

    async def list(self, api_version: str, kind: str, namespace: str | None = None,
                   label_selector: str | None = None,
                   field_selector: str | None = None) -> list[dict[str, Any]]:
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        out = await self.request("GET", path_for(api_version, kind, namespace), query=query)
        items: list[dict[str, Any]] = out.get("items", [])
        return items

    async def patch(self, api_version: str, kind: str, name: str, patch: dict[str, Any],
                    namespace: str | None = None,
                    subresource: str | None = None) -> dict[str, Any]:
        """A JSON merge patch."""
        return await self.request("PATCH",
                                  path_for(api_version, kind, namespace, name, subresource),
                                  patch, content_type="application/merge-patch+json")

    async def delete(self, api_version: str, kind: str, name: str,
                     namespace: str | None = None, background: bool = True) -> None:
        body = {"propagationPolicy": "Background" if background else "Foreground"}
        with contextlib.suppress(NotFound):
            await self.request("DELETE", path_for(api_version, kind, namespace, name), body)


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    """The status condition of type ``ctype``, or None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def has_condition(obj: dict[str, Any] | None, ctype: str, status: str = "True") -> bool:
    cond = condition(obj, ctype)
    return cond is not None and cond.get("status") == status


async def wait_for(predicate: Callable[[], Awaitable[T | None]], timeout: float,
                   what: str = "", interval: float = 0.5) -> T:
    """Poll ``predicate`` until it returns something truthy; return that.

    Bounded: gives up after ``timeout`` seconds with a TimeoutError naming ``what`` and
    the last value seen (exceptions from the predicate count as "not yet").
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = await predicate()
        except (ApiException, NotFound, KeyError, IndexError, TypeError) as err:
            last = err
        else:
            last = value
            if value:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for "
                               f"{what or predicate!r}; last: {str(last)[:2000]}")
        await asyncio.sleep(interval)
