"""The Karpenter backend of the Workload reconciler: NodeClaims for a plan, all or nothing.

For a plan whose shapes Karpenter serves (`admission.backends.backend_of`), the reconciler
hands the check to this backend (`admission.backends.Backend`):

1. `start`: one NodeClaim per planned node (`admission.backends.karpenter.node_claims`),
   created under deterministic names (a restarted or second reconciler finds them and
   creates no duplicate), the check Pending;
2. `follow`: read the attempt's NodeClaims (`attempt_state`). A NodeClaim that is gone
   (Karpenter deletes one it cannot launch: insufficient capacity, NodeClass not ready, not
   registered in time), being deleted, or failed to launch for good fails the attempt, and
   so does an attempt not initialized `request_timeout_seconds` after its first NodeClaim
   was created: then *every* NodeClaim of the attempt is deleted and the next ranked plan
   is tried, or the check retried. Once all are Initialized, wait (bounded by
   `node_wait_seconds`) for their Nodes Ready with the ResourceSlices their shape
   publishes, then verify the gang on the real inventory with fitcore, as for a
   ProvisioningRequest: fits → Ready with the pins (the NodeClaims labelled admitted);
   misfit → Retry, an Event, the mismatch recorded on the NodeShape, and every NodeClaim
   of the attempt deleted (the nodes released);
3. `admitted`: while the check is Ready, once every pod of the gang is bound, drop
   `karpenter.sh/do-not-disrupt` from the NodeClaims and their Nodes and stop managing
   them (the managed-by label removed): Karpenter's consolidation works as usual;
4. `release` / `cleanup`: a NodeClaim fitgate gives up is deleted, unless its gang was
   admitted (then it is handed to Karpenter as in 3).

A missing NodeClaim is confirmed with a GET before the attempt is failed: the watch
cache may not hold a NodeClaim created a moment ago. Why a NodeClaim failed comes from
Karpenter's Warning Events on it (insufficient capacity, NodeClass not ready: Karpenter
deletes such a NodeClaim right after publishing the Event); for a NodeClaim Karpenter is
still deleting, fitgate gives the Event `LAUNCH_EVENT_WAIT_SECONDS` to arrive. The reason
goes into the check's message, a Warning Event on the Workload (`NodeClaimsFailed`), and
the next plan's NodeClaims, so the check keeps saying it while the gang waits for, and
runs on, the next shape.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

import fitcore
from admission import constants as c
from admission import kueue
from admission.check import backends, capacity, predicates, provisioning, readiness
from admission.check.backends import karpenter as k
from admission.check.predicates import Verdict
from admission.kube import client, errors, kinds, store
from admission.runtime import metrics

if TYPE_CHECKING:
    from admission.check import workload

log = structlog.get_logger(__name__)

#: Re-check of an admitted gang whose pods are not all bound yet.
BIND_POLL_SECONDS = 5.0
#: How long after Karpenter started deleting a NodeClaim of an attempt fitgate waits for
#: the Event that says why, before it fails the attempt without it.
LAUNCH_EVENT_WAIT_SECONDS = 5.0


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name"))


class KarpenterBackend:
    """`admission.backends.Backend` for shapes Karpenter serves (module docstring)."""

    name = backends.KARPENTER

    def __init__(self, reconciler: workload.WorkloadReconciler) -> None:
        self.r = reconciler
        # The NodeClaims by the Workload they name (uid label, annotation): a reconcile
        # reads its Workload's own, not every NodeClaim of the cluster.
        claims = reconciler.stores.node_claims
        self._by_workload = store.Index(claims, _workload_keys) if claims is not None \
            else None

    # ------------------------------------------------------------------ reads

    @property
    def enabled(self) -> bool:
        """Whether the process caches NodeClaims (config `karpenter`, chart value
        `karpenter.enabled`)."""
        return self.r.stores.node_claims is not None

    def claims(self) -> list[client.Obj]:
        """fitgate's NodeClaims (the informer caches only those)."""
        s = self.r.stores.node_claims
        return [x for x in s.list() if k.ours(x)] if s is not None else []

    def of_workload(self, key: tuple[str, str]) -> list[client.Obj]:
        """fitgate's NodeClaims under a `_workload_keys` key."""
        return [x for x in self._by_workload.get(key) if k.ours(x)] \
            if self._by_workload is not None else []

    def held(self, wl: client.Obj, check: str) -> list[client.Obj]:
        uid = str(_meta(wl).get("uid", ""))
        value = provisioning.label_value(check)
        return [x for x in self.of_workload(("uid", uid))
                if (_meta(x).get("labels") or {}).get(c.CHECK_LABEL) == value]

    def attempt_of(self, obj: Mapping[str, Any]) -> int:
        return k.attempt_of(obj)

    def claimed_nodes(self, except_uid: str) -> set[str]:
        """Nodes of other gangs' NodeClaims, those gangs not admitted yet: held from every
        other decision, as the nodes of other gangs' ProvisioningRequests are."""
        return {n for x in self.claims()
                if not k.admitted(x)
                and (_meta(x).get("labels") or {}).get(c.WORKLOAD_UID_LABEL) != except_uid
                and (n := k.node_name(x))}

    def waiting(self) -> list[tuple[str, str]]:
        """Workloads whose NodeClaims are not admitted yet: a Node or ResourceSlice change
        may be what they wait for."""
        out = set()
        for x in self.claims():
            if k.admitted(x):
                continue
            ref = (_meta(x).get("annotations") or {}).get(c.WORKLOAD_ANNOTATION)
            if ref:
                ns, _, name = str(ref).partition("/")
                out.add((ns, name))
        return sorted(out)

    # ------------------------------------------------------------------ start

    async def start(self, wl: client.Obj, entry: Mapping[str, Any], wg: Any, attempt: int,
                    index: int, chosen: fitcore.Plan, alternatives: Sequence[fitcore.Plan],
                    why: Sequence[str] = (), previous: str = "") -> float | None:
        """Create the NodeClaims of plan `index`, then say Pending."""
        r = self.r
        check = str(entry["name"])
        node_shapes, bad = r.node_shapes()
        pools = {_name(p): p for p in r.stores.node_pools.list()} \
            if r.stores.node_pools is not None else {}
        alternatives = list(alternatives)
        while True:
            try:
                backends.backend_of(chosen, node_shapes)
                claims = k.node_claims(wl, wg.gang, check, attempt, index, chosen,
                                       alternatives, node_shapes, pools, previous)
                break
            except provisioning.ShapeProblem as exc:
                if not alternatives:
                    return await r.sync_status(wl, entry, r.retry(
                        entry, "configuration", f"cannot ask Karpenter for the planned "
                        f"nodes: {exc}" + (f" ({'; '.join(bad)})" if bad else "")))
                index, chosen, alternatives = index + 1, alternatives[0], alternatives[1:]
        for claim in claims:
            # Created before a restart: the deterministic name finds it.
            with contextlib.suppress(errors.AlreadyExists):
                await r.api.create(kinds.NODE_CLAIM, claim)
        log.info("created NodeClaims", claims=[_name(x) for x in claims],
                 workload=f"{_meta(wl).get('namespace')}/{_meta(wl).get('name')}")
        lead = f"{previous}; " if previous else ""
        text = (f"{lead}asked Karpenter for {provisioning.describe_plan(chosen)} "
                f"(NodeClaims {_names(claims)})")
        if why:
            text += f"; existing nodes are not enough: {why[0]}"
        await r.sync_status(wl, entry, Verdict(c.PENDING, predicates.message("capacity", text),
                                               "capacity"))
        return float(r.settings.pending_poll_seconds)

    # ----------------------------------------------------------------- follow

    async def follow(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int,
                     objs: Sequence[client.Obj]) -> float | None:
        r = self.r
        newest = max(k.plan_index(x) for x in objs)
        for x in objs:
            if k.plan_index(x) != newest:
                await self.release(x, "superseded by the next plan")
        current = sorted((x for x in objs if k.plan_index(x) == newest), key=_name)
        first = current[0]
        annotations = _meta(first).get("annotations") or {}
        meta = _meta(wl)
        expected = {k.claim_name(str(meta.get("namespace") or "default"), str(meta["name"]),
                                 str(entry["name"]), attempt, newest, i)
                    for i in range(k.expected_nodes(first))}
        missing = [n for n in sorted(expected - {_name(x) for x in current})
                   if not await self._exists(n)]
        state = k.attempt_state(current, missing)
        mine = set(state.nodes.values())
        existing = {_name(n) for n in r.stores.nodes.list()} - mine
        try:
            planned = provisioning.plan_from_json(annotations.get(c.PLAN_ANNOTATION, ""),
                                                  existing)
            alternatives = provisioning.plans_from_json(
                annotations.get(c.ALTERNATIVES_ANNOTATION, "[]"))
        except provisioning.PlanFormatError as exc:
            log.warning("unreadable plan on our NodeClaims; asking again", error=str(exc))
            await self.release_all(current, "unreadable plan")
            return 1.0
        names = _names(current)
        earlier = k.previous(first)
        if state.state == "launching":
            left = self.deadline_left(current)
            if left is not None and left <= 0:
                return await self.sync_failed(
                    wl, entry, attempt, newest, current, alternatives,
                    f"NodeClaims {names} were not all initialized "
                    f"{_seconds(r.settings.request_timeout_seconds)}s after their creation "
                    f"({'; '.join(state.waiting[:3])})")
            text = (f"waiting for Karpenter: {provisioning.describe_plan(planned)} "
                    f"({len(current) - len(state.waiting)} of {len(current)} NodeClaims "
                    f"initialized; " + "; ".join(state.waiting[:3]) + ")"
                    + (f"; earlier: {earlier}" if earlier else ""))
            await r.sync_status(wl, entry, Verdict(
                c.PENDING, predicates.message("capacity", text), "capacity"))
            poll = float(r.settings.pending_poll_seconds)
            return poll if left is None else max(1.0, min(poll, left))
        if state.state == "failed":
            said = await self.launch_failures(state)
            wait = self.event_wait_left(current, state, said)
            if wait > 0:
                return wait
            total = k.expected_nodes(first) or len(current) + len(missing)
            return await self.sync_failed(wl, entry, attempt, newest, current, alternatives,
                                          k.describe_failure(state, said, total))
        return await self.sync_verify(wl, entry, current, planned, state, earlier)

    async def launch_failures(self, state: k.Attempt) -> dict[str, tuple[str, str]]:
        """What Karpenter's Events say about the attempt's failed NodeClaims (nothing when
        the Events cannot be read: the message then says what the NodeClaims showed)."""
        events: list[client.Obj] = []
        for name in state.failed:
            try:
                events += (await self.r.api.list(
                    kinds.EVENT, field_selector=f"regarding.kind=NodeClaim,"
                    f"regarding.name={name}")).items
            except errors.ApiError as exc:
                log.debug("cannot read the Events of a NodeClaim", claim=name, error=str(exc))
        return k.launch_failures(events, state.failed)

    def event_wait_left(self, claims: Sequence[client.Obj], state: k.Attempt,
                        said: Mapping[str, tuple[str, str]]) -> float:
        """Seconds to wait for Karpenter's Event on a NodeClaim it has just started deleting
        (it publishes the Event, then deletes); 0: fail the attempt now."""
        if not state.deleting or any(n not in state.deleting for n in state.failed) \
                or all(n in said for n in state.deleting):
            return 0.0
        since = [t for x in claims if _name(x) in state.deleting
                 and (t := predicates.parse_time(_meta(x).get("deletionTimestamp")))]
        if not since:
            return 0.0
        waited = (self.r.clock.now() - min(since)).total_seconds()
        return max(0.0, LAUNCH_EVENT_WAIT_SECONDS - waited)

    async def _exists(self, name: str) -> bool:
        try:
            await self.r.api.get(kinds.NODE_CLAIM, name)
            return True
        except errors.NotFound:
            return False

    def deadline_left(self, claims: Sequence[client.Obj]) -> float | None:
        """Seconds until an attempt not initialized is given up (None: no deadline),
        from its oldest NodeClaim's creationTimestamp (a restart keeps the deadline)."""
        timeout = self.r.settings.request_timeout_seconds
        created = [t for x in claims
                   if (t := predicates.parse_time(_meta(x).get("creationTimestamp")))]
        if not timeout or not created:
            return None
        return timeout - (self.r.clock.now() - min(created)).total_seconds()

    async def sync_failed(self, wl: client.Obj, entry: Mapping[str, Any], attempt: int,
                          index: int, claims: Sequence[client.Obj],
                          alternatives: Sequence[fitcore.Plan], said: str) -> float | None:
        """All or nothing: every NodeClaim of the attempt deleted, then the next ranked
        plan, or Retry."""
        r = self.r
        await self.release_all(claims, "attempt failed")
        said += "; every NodeClaim of the attempt deleted"
        await r.recorder.record(wl, "Warning", "NodeClaimsFailed", said, action="Provision")
        if alternatives:
            try:
                wg = r.gang_of(wl)
            except fitcore.InputError as exc:
                return await r.sync_status(wl, entry, r.retry(
                    entry, "configuration", "the workload cannot be read: "
                    + "; ".join(str(e) for e in exc.errors)))
            return await self.start(wl, entry, wg, attempt, index + 1, alternatives[0],
                                    alternatives[1:], previous=f"{said}; next plan")
        return await r.sync_status(wl, entry, r.retry(entry, "capacity", said))

    def readiness(self, planned: fitcore.Plan, state: k.Attempt
                  ) -> readiness.NodeReadiness:
        """The attempt's Nodes Ready with a ResourceSlice per driver their shape
        publishes."""
        node_shapes, _ = self.r.node_shapes()
        slices_of: dict[str, set[str]] = {}
        for s in self.r.stores.resource_slices.list():
            spec = s.get("spec") or {}
            if spec.get("nodeName"):
                slices_of.setdefault(str(spec["nodeName"]), set()).add(str(spec.get("driver")))
        new_nodes: dict[str, list[str]] = {}
        ready = 0
        waiting: list[str] = []
        totals: dict[str, int] = {}
        for sc in planned.shapes:
            totals[sc.shape] = totals.get(sc.shape, 0) + sc.count
        for shape_name, count in totals.items():
            shape = node_shapes.get(shape_name)
            labels = dict(shape.node_labels) if shape else {}
            drivers = {s.driver for s in shape.slices} if shape else set()
            mine = sorted(n for n in state.nodes.values()
                          if (node := self.r.stores.nodes.get(n)) is not None
                          and all((_meta(node).get("labels") or {}).get(key) == v
                                  for key, v in labels.items()))
            new_nodes[shape_name] = mine
            ok = [n for n in mine if readiness.node_ready(self.r.stores.nodes.get(n))
                  and drivers <= slices_of.get(n, set())]
            ready += min(count, len(ok))
            if len(ok) < count:
                waiting.append(f"{shape_name}: {len(ok)} of {count} new nodes ready with "
                               "their ResourceSlices")
        return readiness.NodeReadiness(ready, planned.nodes, new_nodes, waiting)

    async def sync_verify(self, wl: client.Obj, entry: Mapping[str, Any],
                          claims: Sequence[client.Obj], planned: fitcore.Plan,
                          state: k.Attempt, earlier: str = "") -> float | None:
        r = self.r
        names = _names(claims)
        ready = self.readiness(planned, state)
        since = max((t for x in claims
                     if (t := predicates.parse_time((kueue.condition(x, k.INITIALIZED)
                                                     or {}).get("lastTransitionTime")))),
                    default=r.clock.now())
        waited = (r.clock.now() - since).total_seconds()
        if not ready.complete and waited < r.settings.node_wait_seconds:
            text = (f"NodeClaims {names} are initialized; waiting for their nodes: "
                    + "; ".join(ready.waiting))
            await r.sync_status(wl, entry, Verdict(
                c.PENDING, predicates.message("capacity", text), "capacity"))
            return float(min(r.settings.node_poll_seconds,
                             max(1.0, r.settings.node_wait_seconds - waited)))
        try:
            wg = r.gang_of(wl)
        except fitcore.InputError as exc:
            return await r.sync_status(wl, entry, r.retry(
                entry, "configuration", "the workload cannot be read: "
                + "; ".join(str(e) for e in exc.errors)))
        started = time.perf_counter()
        scope = r.scope_of(wl)
        result = await r.around_promises(wl, wg.gang, lambda held: r.inventory.verify_async(
            wg.gang, planned, node_filter=scope.node_filter if scope else None, held=held))
        if result is None:
            return r.settings.promise_poll_seconds
        metrics.DECISION_SECONDS.labels(operation="verify").observe(
            time.perf_counter() - started)
        if result.verdict == "fits":
            for x in claims:
                with contextlib.suppress(errors.NotFound):
                    await r.api.patch(kinds.NODE_CLAIM, _name(x),
                                      {"metadata": {"labels": {k.ADMITTED_LABEL: "true"}}})
            note = "" if ready.complete else (
                f" (after {int(waited)}s, " + "; ".join(ready.waiting) + ")")
            if earlier:
                note += f"; earlier: {earlier}"
            return await r.sync_ready(
                wl, entry, wg, result.placements, {},
                f"verified on the nodes of NodeClaims {names}: "
                + capacity.where(result.placements) + note)
        shown = list(result.mismatches[:3]) or list(result.reasons[:2])
        if not ready.complete:
            shown.insert(0, f"after waiting {int(waited)}s: " + "; ".join(ready.waiting))
        if result.verdict == "undecided":
            verdict = r.retry(entry, "configuration",
                              "fitgate could not decide within its work budget on the "
                              f"nodes of NodeClaims {names}: " + "; ".join(shown))
        else:
            verdict = r.retry(entry, "coordination",
                              f"the nodes of NodeClaims {names} do not keep their shapes' "
                              "promise: " + ("; ".join(shown) or "the gang does not fit them")
                              + f" ({len(result.mismatches)} differences); NodeClaims "
                              "deleted")
        wait = await r.sync_status(wl, entry, verdict)
        if result.verdict == "misfit":
            await r.recorder.record(wl, "Warning", "ProvisionedNodesMisfit", verdict.message,
                                    action="Verify")
            await capacity.sync_shape_mismatches(r, wl, f"NodeClaims {names}", planned,
                                                 result, ready)
        await self.release_all(claims, "misfit")
        return wait

    # ---------------------------------------------------------------- admitted

    async def admitted(self, wl: client.Obj, check: str) -> float | None:
        """Once every pod of the admitted gang is bound, hand its NodeClaims to Karpenter:
        do-not-disrupt dropped from them and their Nodes, fitgate's label removed."""
        claims = [x for x in self.held(wl, check) if k.admitted(x)]
        if not claims:
            return None
        uid = str(_meta(wl).get("uid"))
        try:
            planned = provisioning.plan_from_json(
                (_meta(claims[0]).get("annotations") or {}).get(c.PLAN_ANNOTATION, ""))
        except provisioning.PlanFormatError:
            planned = None
        want = len(planned.placements) if planned is not None else 0
        pods = self.r.stores.pods
        bound = sum(1 for p in (pods.list(str(_meta(wl).get("namespace"))) if pods else ())
                    if uid in ((_meta(p).get("labels") or {}).get(c.PLACEMENT_LABEL),
                               (_meta(p).get("labels") or {}).get(c.PLACEMENT_WORKLOAD_LABEL))
                    and (p.get("spec") or {}).get("nodeName"))
        if pods is not None and bound < want:
            return BIND_POLL_SECONDS
        for x in claims:
            await self.hand_over(x, "the gang's pods are bound")
        return None

    async def hand_over(self, claim: Mapping[str, Any], why: str) -> None:
        """Karpenter's from now on: do-not-disrupt dropped (NodeClaim and Node), fitgate's
        managed-by label removed (fitgate neither holds nor deletes it any more)."""
        node = k.node_name(claim)
        if node is not None:
            with contextlib.suppress(errors.NotFound):
                await self.r.api.patch(kinds.NODE, node, {"metadata": {"annotations": {
                    k.DO_NOT_DISRUPT: None}}})
        with contextlib.suppress(errors.NotFound):
            await self.r.api.patch(kinds.NODE_CLAIM, _name(claim), {"metadata": {
                "annotations": {k.DO_NOT_DISRUPT: None},
                "labels": {c.MANAGED_LABEL: None}}})
        log.info("NodeClaim handed to Karpenter", claim=_name(claim), node=node, why=why)

    # ----------------------------------------------------------------- release

    async def release(self, obj: Mapping[str, Any], why: str) -> None:
        """Give a NodeClaim up: deleted (its node released), or, when its gang was
        admitted, handed over to Karpenter."""
        if k.admitted(obj):
            await self.hand_over(obj, why)
            return
        try:
            await self.r.api.delete(kinds.NODE_CLAIM, _name(obj))
            log.info("deleted NodeClaim", claim=_name(obj), why=why)
        except errors.NotFound:
            pass

    async def release_all(self, claims: Sequence[Mapping[str, Any]], why: str) -> None:
        for x in claims:
            await self.release(x, why)

    async def cleanup(self, namespace: str, name: str, keep_uid: str | None,
                      uid: str | None = None) -> None:
        """Release the NodeClaims of the Workload `namespace/name` except those of the
        live Workload `keep_uid` (None: all)."""
        named = self.of_workload(("workload", f"{namespace}/{name}"))
        seen = {id(x) for x in named}
        by_uid = [x for x in self.of_workload(("uid", uid)) if id(x) not in seen] if uid else []
        for x in [*named, *by_uid]:
            labels = _meta(x).get("labels") or {}
            if keep_uid is not None and labels.get(c.WORKLOAD_UID_LABEL) == keep_uid:
                continue
            await self.release(x, "workload gone, finished or evicted")


def _workload_keys(claim: client.Obj) -> list[tuple[str, str]]:
    keys = []
    named = (_meta(claim).get("annotations") or {}).get(c.WORKLOAD_ANNOTATION)
    if named:
        keys.append(("workload", str(named)))
    uid = (_meta(claim).get("labels") or {}).get(c.WORKLOAD_UID_LABEL)
    if uid:
        keys.append(("uid", str(uid)))
    return keys


def _names(claims: Sequence[Mapping[str, Any]]) -> str:
    names = sorted(_name(x) for x in claims)
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
