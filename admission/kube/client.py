"""The thin client surface the rest of fitgate programs against.

`Client` is a Protocol: `ApiClient` (kubernetes_asyncio) and `fake.FakeClient` (memory)
implement it. Objects go in and come out as plain dicts. Every method raises the errors of
`admission.kube.errors`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol

from admission.kube import kinds

Obj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
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
                   label_selector: str | None = None) -> Listing:
        """All objects of the kind (in a namespace, or all namespaces when None)."""

    def watch(self, kind: kinds.Kind, resource_version: str,
              namespace: str | None = None) -> AsyncIterator[WatchEvent]:
        """Changes after `resource_version`; raises Gone when it is too old. The iterator
        ends when the server closes the watch (the caller watches again from the last
        resourceVersion it saw)."""

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

    async def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None,
                     *, precondition_uid: str | None = None) -> None:
        """Raises NotFound."""
