"""Kubernetes Events (events.k8s.io/v1) about the objects fitgate decides on."""

from __future__ import annotations

import datetime
import random
from collections.abc import Mapping
from typing import Any, Literal

import structlog

from admission import clock as clock_
from admission import constants as c
from admission import kueue
from admission.kube import client, errors, kinds

log = structlog.get_logger(__name__)


class Recorder:
    """Writes an Event regarding an object; a failure to write one is logged, never
    fatal to the decision."""

    def __init__(self, api: client.Client, clock: clock_.Clock,
                 instance: str = "fitgate") -> None:
        self.api = api
        self.clock = clock
        self.instance = instance

    async def record(self, regarding: Mapping[str, Any], type_: Literal["Normal", "Warning"],
                     reason: str, note: str, action: str = "Decide",
                     kind: kinds.Kind = kinds.WORKLOAD) -> None:
        meta = regarding.get("metadata") or {}
        event = {
            "apiVersion": kinds.EVENT.api_version, "kind": "Event",
            # As client-go names events: the object's name, a dot, a unique suffix (a
            # generateName may not end in a dot). 64 random bits, as uuid4's first 16
            # hex digits were, without its read of the OS's random source (a system
            # call that lets the decision threads take the GIL from the event loop).
            "metadata": {"name": f"{str(meta.get('name', 'fitgate'))[:236]}."
                                 f"{random.getrandbits(64):016x}",
                         "namespace": meta.get("namespace") or "default"},
            "eventTime": self.clock.now().astimezone(datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": c.CONTROLLER_NAME,
            "reportingInstance": self.instance,
            "action": action, "reason": reason, "type": type_,
            "note": kueue.one_line(note, 1024),
            # Objects from a list carry no apiVersion/kind: the caller names the kind.
            "regarding": {"apiVersion": regarding.get("apiVersion") or kind.api_version,
                          "kind": regarding.get("kind") or kind.kind, "name": meta.get("name"),
                          "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        }
        try:
            await self.api.create(kinds.EVENT, event)
        except errors.ApiError as exc:
            # An event is a courtesy: the check's message carries the same words.
            log.warning("event not recorded", reason=reason, error=str(exc))
