"""Kubernetes Events (events.k8s.io/v1) about the objects fitgate decides on."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Mapping
from typing import Any, Literal

from admission.check import constants as c
from admission.check import predicates
from admission.kube import client, errors, kinds


class Recorder:
    """Writes an Event regarding an object; a failure to write one is logged by the
    caller's retry, never fatal to the decision."""

    def __init__(self, api: client.Client, clock: Callable[[], datetime.datetime],
                 instance: str = "fitgate") -> None:
        self.api = api
        self.clock = clock
        self.instance = instance

    async def record(self, regarding: Mapping[str, Any], type_: Literal["Normal", "Warning"],
                     reason: str, note: str, action: str = "Decide") -> None:
        meta = regarding.get("metadata") or {}
        event = {
            "apiVersion": kinds.EVENT.api_version, "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'fitgate')}.",
                         "namespace": meta.get("namespace") or "default"},
            "eventTime": self.clock().astimezone(datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": c.CONTROLLER_NAME,
            "reportingInstance": self.instance,
            "action": action, "reason": reason, "type": type_,
            "note": predicates.message(None, note, limit=1024),
            "regarding": {"apiVersion": regarding.get("apiVersion"),
                          "kind": regarding.get("kind"), "name": meta.get("name"),
                          "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        }
        # An event is a courtesy: the check's message carries the same words.
        with contextlib.suppress(errors.ApiError):
            await self.api.create(kinds.EVENT, event)
