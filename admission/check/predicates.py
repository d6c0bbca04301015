"""Pure rules of the check entry fitgate writes; no I/O (Kueue reads: `admission.kueue`).

The Workload reconciler decides with these, so each rule (whose check is ours, when a
Workload may be written, how long Retry waits, what a message looks like) is testable on
plain dicts.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from admission import constants as c
from admission import kueue

State = Literal["Pending", "Ready", "Retry", "Rejected"]
Category = Literal["capacity", "configuration", "coordination"]


def may_write(workload: Mapping[str, Any], state: str) -> bool:
    """Retry and Rejected are never written while the Workload is Evicted or Finished:
    Kueue would not requeue it (kueue#3543). Nothing is written to a finished one."""
    if kueue.finished(workload):
        return False
    return not (kueue.evicted(workload) and state in (c.RETRY, c.REJECTED))


def backoff(retry_count: int, base: int, cap: int) -> int:
    """Seconds before Kueue requeues after Retry: base·2^retryCount, at most cap."""
    return int(min(cap, base * 2 ** max(0, min(retry_count, 30))))


def message(category: Category | None, text: str, limit: int = c.MESSAGE_LIMIT) -> str:
    """One line a person can read, led by the category holding the gang back."""
    return kueue.one_line(f"{category}: {text}" if category else text, limit)


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What fitgate wants its check entry to say."""

    state: State
    message: str
    category: Category | None = None
    pod_set_updates: Sequence[Mapping[str, Any]] | None = None  # with Ready only
    requeue_after: int | None = None  # with Retry only


def timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC)
    except ValueError:
        try:
            return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None


def desired_entry(current: Mapping[str, Any], verdict: Verdict, now: datetime.datetime
                  ) -> dict[str, Any]:
    """Our entry as fitgate applies it: lastTransitionTime kept unless the state changes;
    podSetUpdates only with Ready, requeueAfterSeconds only with Retry."""
    same = current.get("state") == verdict.state and current.get("lastTransitionTime")
    out: dict[str, Any] = {
        "name": current["name"], "state": verdict.state, "message": verdict.message,
        "lastTransitionTime": current["lastTransitionTime"] if same else timestamp(now)}
    if verdict.state == c.READY and verdict.pod_set_updates is not None:
        out["podSetUpdates"] = [dict(u) for u in verdict.pod_set_updates]
    if verdict.state == c.RETRY and verdict.requeue_after is not None:
        out["requeueAfterSeconds"] = verdict.requeue_after
    return out


def changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` changes what the entry says."""
    keys = ("state", "message", "podSetUpdates", "requeueAfterSeconds")
    return any(current.get(k) != desired.get(k) for k in keys
               if k in desired or k in ("state", "message"))
