"""Contain every failure to its own Workload.

Deciding one Workload reads its gang, its claims and selectors, the inventory, the
requests and policies around it; any of it can fail in a way nobody foresaw (a bug, an
input no reader was written for). Before this module, an exception escaped the reconcile:
the controller runtime retried the key forever with no word on the Workload, which kept
its quota reserved, and no Event told anyone why.

Now the Workload reconciler hands such an exception to `contain`, which answers that
Workload, and only it:

- an error of the Workload's own configuration (`fitcore.CelError`: a selector of its
  claims that does not compile, exceeds the cost limit or cannot be evaluated;
  `fitcore.InputError`: a gang that does not read) -> **Rejected**, with the error in
  the check's message. The same input fails the same way on every try, so retrying only
  holds quota; Rejected is what Kueue users expect of a bad spec: Kueue deactivates the
  Workload and says so in its conditions, the tenant fixes the claim and resubmits.
- anything else -> **Retry** with exponential backoff (`WorkloadReconciler.retry`:
  base·2^retryCount seconds, capped; Kueue counts the retries, releases the quota and
  requeues the Workload after the backoff), the exception's type and text in the message.

Both also write a Warning Event `DecisionFailed` on the Workload and log the traceback.
Errors of the API server (`errors.ApiError`) are not the Workload's: they are raised on,
for the controller runtime's rate-limited retry. Every other Workload goes on being
decided: the controller's workers each reconcile one key, and a decision's time is
bounded by the inventory (an overrunning decision is answered `undecided` and abandoned,
see `admission.inventory`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import structlog

import fitcore
from admission import constants as c
from admission.check import predicates
from admission.check.predicates import Verdict
from admission.kube import client, errors
from admission.runtime import events, handoff

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: The Event reason fitgate records when a decision failed.
REASON = "DecisionFailed"
#: ... and when a decision ran out of its work budget or time (`undecided`, retried).
UNDECIDED = "DecisionUndecided"


class Reconciler(Protocol):
    """What `contain` needs of the Workload reconciler."""

    recorder: events.Recorder

    def retry(self, entry: Mapping[str, Any], category: predicates.Category, text: str
              ) -> Verdict: ...

    async def sync_status(self, wl: client.Obj, entry: Mapping[str, Any], verdict: Verdict
                          ) -> float | None: ...


def _describe(exc: BaseException) -> str:
    if isinstance(exc, fitcore.InputError):
        return "; ".join(str(e) for e in exc.errors)
    text = str(exc) or repr(exc)
    return text if isinstance(exc, fitcore.CelError) else f"{type(exc).__name__}: {text}"


def verdict(r: Reconciler, entry: Mapping[str, Any], exc: BaseException) -> Verdict:
    """Rejected for the Workload's own configuration, Retry with backoff otherwise."""
    if isinstance(exc, (fitcore.CelError, fitcore.InputError)):
        return Verdict(c.REJECTED, predicates.message(
            "configuration", "the workload cannot be decided: " + _describe(exc)),
            "configuration")
    return r.retry(entry, "coordination",
                   "fitgate failed while deciding this workload: " + _describe(exc))


async def contain(r: Reconciler, wl: client.Obj, entry: Mapping[str, Any],
                  exc: Exception) -> float | None:
    """Answer the Workload whose decision raised `exc` (module docstring); re-raises the
    API server's errors."""
    if isinstance(exc, errors.ApiError):
        raise exc
    meta = wl.get("metadata") or {}
    answer = verdict(r, entry, exc)
    log.error("decision failed; contained to its workload", check=entry.get("name"),
              workload=f"{meta.get('namespace')}/{meta.get('name')}", state=answer.state,
              exc_info=exc)
    wait = await r.sync_status(wl, entry, answer)
    await r.recorder.record(wl, "Warning", REASON, answer.message, action="Decide")
    return wait


class Bounded:
    """Questions to a synchronous engine (the idle cluster's, shared with the gate), one at
    a time off the loop, each answered within `timeout` seconds or not at all (None).

    A question past its deadline cannot be stopped and still holds the engine; while it
    runs, later questions get None at once instead of queueing behind it (and piling up
    threads), so the Workloads that ask are retried rather than stalled."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self._running: asyncio.Future[Any] | None = None
        # One question runs at a time; one that overran keeps the thread until it ends
        # (later questions get None meanwhile, see `ask`).
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="fitgate-idle-question")
        weakref.finalize(self, self._executor.shutdown, wait=False)

    async def ask(self, fn: Callable[..., T], *args: Any) -> T | None:
        if self._running is not None and not self._running.done():
            log.warning("an earlier question to the engine overran and still runs; "
                        "not asking")
            return None
        async with self._lock:
            running, _ = handoff.submit(self._executor, fn, *args)
            self._running = running
            try:
                return await asyncio.wait_for(asyncio.shield(running), self.timeout)
            except TimeoutError:
                log.warning("a question to the engine overran its deadline; left to finish",
                            timeout=self.timeout)
                return None
