"""Leader election on a coordination.k8s.io/v1 Lease.

Every replica runs an `Elector`; the one holding the Lease runs the leader-only
controllers. The rules are client-go's:

- Acquire: create the Lease, or take it over when its holder is empty (released) or has
  not renewed it for `lease_duration` *as observed by this replica's clock* (the time at
  which this replica last saw the Lease's record change, not the remote renewTime, so
  clock skew between replicas does not matter). Writes are guarded by resourceVersion (PUT):
  of two replicas racing, one gets Conflict and stays a follower.
- Renew every `retry_period`. When renewing has not succeeded for `renew_deadline` (API
  unreachable, or another holder took over), leadership is lost: `leading` is cleared and
  the `lost` event set, so that leader-only work stops. The elector then campaigns again.
- Release on graceful shutdown: the holder writes an empty holderIdentity, so the next
  replica takes over at once instead of after `lease_duration`.

`renew_deadline < lease_duration` keeps the old leader's work stopped before any other
replica can see the Lease as expired.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import structlog

from admission import clock as clock_
from admission.kube import client, errors, kinds

log = structlog.get_logger("fitgate.lease")


def micro_time(t: datetime.datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    def __init__(self, api: client.Client, *, name: str, namespace: str, identity: str,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0,
                 retry_period: float = 2.0, clock: clock_.Clock | None = None) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs 0 < retry_period < renew_deadline < "
                             f"lease_duration, got {retry_period}, {renew_deadline}, "
                             f"{lease_duration}")
        self.api = api
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock or clock_.SystemClock()
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()  # set when leadership held was lost (cleared on gain)
        self.transitions = 0  # times this replica became leader
        self._observed: tuple[Any, ...] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self._last_renew = 0.0
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    async def run(self) -> None:
        """Campaign and renew until cancelled (then release if leading)."""
        try:
            while True:
                ok = await self._try()
                now = self.clock.monotonic()
                if ok:
                    self._last_renew = now
                    if not self.is_leader:
                        self.transitions += 1
                        self.lost.clear()
                        self.leading.set()
                        self._log.info("lease.acquired")
                elif self.is_leader and (now - self._last_renew >= self.renew_deadline
                                         or self._held_by_other()):
                    self.leading.clear()
                    self.lost.set()
                    self._log.warning("lease.lost",
                                      seconds_since_renew=round(now - self._last_renew, 3))
                await self.clock.sleep(self.retry_period)
        except asyncio.CancelledError:
            await asyncio.shield(self.release())
            raise

    def _held_by_other(self) -> bool:
        return self._observed is not None and self._observed[0] not in ("", None,
                                                                         self.identity)

    async def _try(self) -> bool:
        """One acquire-or-renew; True when this replica holds the Lease after it."""
        now = self.clock.now()
        try:
            lease = await self.api.get(kinds.LEASE, self.name, self.namespace)
        except errors.NotFound:
            try:
                await self.api.create(kinds.LEASE, {
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, acquire=True, transitions=0)})
            except errors.ApiError as exc:
                self._log.info("lease.create_failed", error=str(exc))
                return False
            self._see(self.identity, micro_time(now))
            return True
        except errors.ApiError as exc:
            self._log.info("lease.get_failed", error=str(exc))
            return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self._see(holder, spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = self.clock.monotonic() - self._observed_at >= duration
        if holder and holder != self.identity and not expired:
            return False
        mine = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        new_spec = self._spec(now, acquire=not mine, transitions=transitions)
        if mine:
            new_spec["acquireTime"] = spec.get("acquireTime") or new_spec["renewTime"]
        body = {"metadata": {**lease["metadata"]}, "spec": new_spec}
        try:
            await self.api.update(kinds.LEASE, body)
        except errors.ApiError as exc:
            self._log.info("lease.update_failed", error=str(exc))
            return False
        self._see(self.identity, new_spec["renewTime"])
        return True

    def _spec(self, now: datetime.datetime, *, acquire: bool, transitions: int
              ) -> dict[str, Any]:
        t = micro_time(now)
        spec: dict[str, Any] = {"holderIdentity": self.identity,
                                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                                "renewTime": t, "leaseTransitions": transitions}
        if acquire:
            spec["acquireTime"] = t
        return spec

    def _see(self, holder: str, renew_time: Any) -> None:
        record = (holder, renew_time)
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock.monotonic()

    async def release(self) -> None:
        """Give the Lease up (graceful shutdown): an empty holder, so another replica takes
        over at once. Does nothing when not leading."""
        if not self.is_leader:
            return
        self.leading.clear()
        self.lost.set()
        try:
            lease = await self.api.get(kinds.LEASE, self.name, self.namespace)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity="", leaseDurationSeconds=1,
                        renewTime=micro_time(self.clock.now()))
            await self.api.update(kinds.LEASE, {"metadata": lease["metadata"], "spec": spec})
            self._log.info("lease.released")
        except errors.ApiError as exc:
            self._log.warning("lease.release_failed", error=str(exc))
