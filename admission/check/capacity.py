"""Capacity: the Workload reconciler's steps that ask the autoscaler for nodes and check
what came.

- `sync_new_request`: create the ProvisioningRequest of a plan (and its placeholder
  PodTemplates, `provisioning.build`), the check Pending with what it asks for;
- `sync_request`: follow the request: Failed / BookingExpired / CapacityRevoked → the next
  ranked plan or Retry; unanswered → admit on capacity freed meanwhile
  (`sync_fits_meanwhile`), or give it up after `request_timeout_seconds`
  (`sync_timed_out`); Provisioned → `sync_verify`;
- `sync_verify`: wait (bounded) for the new nodes (`readiness`), verify the gang on them:
  Ready with the autoscaler's consume annotations, or Retry with the mismatches recorded
  on the NodeShapes (`sync_shape_mismatches`);
- `cleanup_requests`, `delete_request`: fitgate's requests and templates deleted when the
  Workload is gone, finished or evicted, or its check retried.

Each takes the reconciler (`rec`) for its stores, inventory and the status write it ends
with (`rec.sync_status`).
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
from admission.check import predicates, provisioning, readiness, trusted
from admission.check.predicates import Verdict
from admission.engine import gangs
from admission.kube import client, errors, kinds
from admission.runtime import failpoint, metrics

if TYPE_CHECKING:
    from admission.check.workload import WorkloadReconciler as Rec

log = structlog.get_logger("admission.check.workload")


async def sync_new_request(rec: Rec, wl: client.Obj, entry: Mapping[str, Any],
                           wg: gangs.WorkloadGang, attempt: int, index: int,
                           chosen: fitcore.Plan, alternatives: list[fitcore.Plan],
                           why: Sequence[str] = (), previous: str = "") -> float | None:
    """Create the request for plan `index` (and its templates), then say Pending;
    for a plan Karpenter serves, its NodeClaims (`admission.check.karpenter`)."""
    check = str(entry["name"])
    node_shapes, bad = rec.node_shapes()
    if any(s.karpenter is not None for s in node_shapes.values()) and any(
            (shape := node_shapes.get(sc.shape)) is not None and shape.karpenter
            is not None for sc in chosen.shapes):
        if not rec.karpenter.enabled:
            return await rec.sync_status(wl, entry, rec.retry(
                entry, "configuration", "the plan needs NodeShapes Karpenter serves, "
                "and this fitgate does not watch Karpenter's NodeClaims"))
        return await rec.karpenter.start(wl, entry, wg, attempt, index, chosen,
                                         alternatives, why, previous)
    while True:
        try:
            # Every node's labels and the nodes matching a shape's, from the ledger's
            # node index (kept from the node store's events), not a pass over the
            # plan's existing nodes (every node of the cluster, for a plan of new ones).
            request, templates = provisioning.build(
                wl, wg.gang, check, attempt, index, chosen, alternatives, node_shapes,
                rec.ledger.node_labels(), rec.ledger.nodes_matching)
            break
        except provisioning.ShapeProblem as exc:
            if not alternatives:
                return await rec.sync_status(wl, entry, rec.retry(
                    entry, "configuration", f"cannot ask for the planned nodes: {exc}"
                    + (f" ({'; '.join(bad)})" if bad else "")))
            index, chosen, alternatives = index + 1, alternatives[0], alternatives[1:]
    for t in templates:
        await create_template(rec, t)
    name = request["metadata"]["name"]
    try:
        await rec.api.create(kinds.PROVISIONING_REQUEST, request)
        metrics.request("created")
    except errors.AlreadyExists:
        pass  # created before a restart: the deterministic name finds it
    failpoint.reach("requested")
    lead = f"{previous}; " if previous else ""
    text = (f"{lead}asked the autoscaler for {provisioning.describe_plan(chosen)} "
            f"(ProvisioningRequest {name})")
    if why:
        text += f"; existing nodes are not enough: {why[0]}"
    await rec.sync_status(wl, entry, Verdict(c.PENDING,
                                              predicates.message("capacity", text),
                                              "capacity"))
    return float(rec.settings.pending_poll_seconds)


async def create_template(rec: Rec, template: client.Obj) -> None:
    meta = template["metadata"]
    try:
        await rec.api.create(kinds.POD_TEMPLATE, template)
    except errors.AlreadyExists:
        have = await rec.api.get(kinds.POD_TEMPLATE, meta["name"], meta["namespace"])
        written = (_meta(have).get("annotations") or {}).get(c.TEMPLATE_DIGEST_ANNOTATION)
        if written != meta["annotations"][c.TEMPLATE_DIGEST_ANNOTATION]:
            # Left by a crash before its request was created, for another plan (or by
            # a version that wrote no digest). The same template is kept: recreating it
            # would race whoever deletes fitgate's objects (`fitgate release --all`).
            await rec.api.delete(kinds.POD_TEMPLATE, meta["name"], meta["namespace"])
            await rec.api.create(kinds.POD_TEMPLATE, template)


async def sync_request(rec: Rec, wl: client.Obj, entry: Mapping[str, Any], attempt: int,
                       request: client.Obj) -> float | None:
    name = _meta(request)["name"]
    annotations = _meta(request).get("annotations") or {}
    state, cond = provisioning.state(request)
    try:
        trusted.read(request, rec.stores.workloads,  # every annotation reads back
                     kueue.ours(rec.stores.admission_checks.list()))
        planned = provisioning.plan_from_json(annotations.get(c.PLAN_ANNOTATION, ""),
                                              rec.ledger.existing_nodes(request))
        alternatives = provisioning.plans_from_json(
            annotations.get(c.ALTERNATIVES_ANNOTATION, "[]"))
    except (provisioning.PlanFormatError, trusted.Untrusted) as exc:
        log.warning("unreadable plan on our request; asking again", request=name,
                    error=str(exc))
        await delete_request(rec, request, "unreadable plan")
        return 1.0
    cond_message = str((cond or {}).get("message") or (cond or {}).get("reason") or "")
    if state in ("failed", "capacity-revoked", "booking-expired"):
        metrics.request(state)
        count_unused(rec, request, planned, used=set())
        what = {"failed": "failed", "capacity-revoked": "lost its capacity",
                "booking-expired": "expired before the gang was admitted"}[state]
        said = f"ProvisioningRequest {name} {what}" + (
            f" ({cond_message})" if cond_message else "")
        if alternatives:
            try:
                wg = rec.gang_of(wl)
            except fitcore.InputError as exc:
                return await rec.sync_status(wl, entry, rec.retry(
                    entry, "configuration", "the workload cannot be read: "
                    + "; ".join(str(e) for e in exc.errors)))
            wait = await sync_new_request(rec,
                wl, entry, wg, attempt, provisioning.plan_index(request) + 1,
                alternatives[0], alternatives[1:], previous=said + "; next plan")
            await delete_request(rec, request, state)
            return wait
        wait = await rec.sync_status(wl, entry, rec.retry(entry, "capacity", said))
        await delete_request(rec, request, state)
        return wait
    if state != "provisioned":
        # Capacity may have freed up while the autoscaler works: then admit on it and
        # give the request up (nodes nobody waits for are not bought).
        admitted, wait = await sync_fits_meanwhile(rec, wl, entry, request)
        if admitted:
            return wait
        left = deadline_left(rec, request)
        if left is not None and left <= 0:
            return await sync_timed_out(rec, wl, entry, request, state)
        text = (f"waiting for the autoscaler: {provisioning.describe_plan(planned)} "
                f"asked by ProvisioningRequest {name}"
                + (" (accepted)" if state == "accepted" else ""))
        await rec.sync_status(wl, entry, Verdict(
            c.PENDING, predicates.message("capacity", text), "capacity"))
        poll = float(rec.settings.pending_poll_seconds)
        return poll if left is None else max(1.0, min(poll, left))
    failpoint.reach("provisioned")
    return await sync_verify(rec, wl, entry, request, planned, cond)


def deadline_left(rec: Rec, request: Mapping[str, Any]) -> float | None:
    """Seconds until an unanswered request is given up (None: no deadline). Counted
    from its creationTimestamp, so a restarted reconciler keeps the same deadline."""
    timeout = rec.settings.request_timeout_seconds
    created = predicates.parse_time(_meta(request).get("creationTimestamp"))
    if not timeout or created is None:
        return None
    return timeout - (rec.clock.now() - created).total_seconds()


async def sync_timed_out(rec: Rec, wl: client.Obj, entry: Mapping[str, Any],
                         request: client.Obj, state: str) -> float | None:
    """Retry, and the request with its templates deleted: the autoscaler did not
    answer in time (it may be down, or not serve the class). The next attempt asks
    again with a request of its own (attempt + 1)."""
    meta = _meta(request)
    created = predicates.parse_time(meta.get("creationTimestamp"))
    waited = (rec.clock.now() - created).total_seconds() if created else 0.0
    metrics.request("timed-out")
    said = "accepted but not provisioned" if state == "accepted" else (
        "neither accepted nor provisioned")
    text = (f"ProvisioningRequest {meta['name']} was {said} after waiting {int(waited)}s "
            f"(deadline {_seconds(rec.settings.request_timeout_seconds)}s); "
            "the autoscaler did not answer in time")
    wait = await rec.sync_status(wl, entry, rec.retry(entry, "capacity", text))
    await delete_request(rec, request, "timed out")
    return wait


async def sync_fits_meanwhile(rec: Rec, wl: client.Obj, entry: Mapping[str, Any],
                              request: client.Obj) -> tuple[bool, float | None]:
    """Ready on existing nodes, and the request deleted, when the gang fits them now
    (True, requeue); (False, None) when it does not, or cannot be read (the request's
    own path reports that)."""
    try:
        wg = rec.gang_of(wl)
    except fitcore.InputError:
        return False, None
    # Only nodes that were there before the request: nodes the autoscaler has added
    # for it (before it says Provisioned) are the request's, verified on that path.
    existing = rec.ledger.existing_nodes(request)
    started = time.perf_counter()
    scope = rec.scope_of(wl)
    allowed = scope.node_filter if scope is not None else None

    def node_filter(node: Any) -> bool:
        return node.name in existing and (allowed is None or allowed(node))
    result = await rec.inventory.fit_async(wg.gang, node_filter=node_filter,
                                            held=rec.held_for_others(wl, wg.gang))
    metrics.DECISION_SECONDS.labels(operation="fit").observe(
        time.perf_counter() - started)
    if result.verdict != "fits":
        return False, None
    name = _meta(request)["name"]
    wait = await rec.sync_ready(
        wl, entry, wg, result.placements, result.domains,
        f"fits on existing nodes (freed while ProvisioningRequest {name} was pending): "
        + where(result.placements))
    await delete_request(rec, request, "fits on existing nodes meanwhile")
    return True, wait


async def sync_verify(rec: Rec, wl: client.Obj, entry: Mapping[str, Any],
                      request: client.Obj, planned: fitcore.Plan,
                      cond: Mapping[str, Any] | None) -> float | None:
    name = _meta(request)["name"]
    ready = rec.readiness(request, planned)
    since = predicates.parse_time((cond or {}).get("lastTransitionTime")) or rec.clock.now()
    waited = (rec.clock.now() - since).total_seconds()
    if not ready.complete and waited < rec.settings.node_wait_seconds:
        text = (f"ProvisioningRequest {name} is provisioned; waiting for the new nodes: "
                + "; ".join(ready.waiting))
        await rec.sync_status(wl, entry, Verdict(
            c.PENDING, predicates.message("capacity", text), "capacity"))
        return float(min(rec.settings.node_poll_seconds,
                         max(1.0, rec.settings.node_wait_seconds - waited)))
    try:
        wg = rec.gang_of(wl)
    except fitcore.InputError as exc:
        return await rec.sync_status(wl, entry, rec.retry(
            entry, "configuration", "the workload cannot be read: "
            + "; ".join(str(e) for e in exc.errors)))
    started = time.perf_counter()
    scope = rec.scope_of(wl)
    verified = await rec.around_promises(wl, wg.gang, lambda held: rec.inventory.verify_async(
        wg.gang, planned, node_filter=scope.node_filter if scope else None, held=held))
    if verified is None:
        return rec.settings.promise_poll_seconds
    result = verified
    metrics.DECISION_SECONDS.labels(operation="verify").observe(
        time.perf_counter() - started)
    if result.verdict == "fits":
        metrics.request("verified")
        used = {p.node for p in result.placements}
        count_unused(rec, request, planned, used, ready)
        node_shapes, _ = rec.node_shapes()
        classes = {provisioning.provisioning_class(node_shapes[s.shape])
                   for s in planned.shapes if s.shape in node_shapes}
        cls = classes.pop() if len(classes) == 1 else str(
            (request.get("spec") or {}).get("provisioningClassName")
            or c.DEFAULT_PROVISIONING_CLASS)
        note = "" if ready.complete else (
            f" (after {int(waited)}s, " + "; ".join(ready.waiting) + ")")
        return await rec.sync_ready(
            wl, entry, wg, result.placements, {},
            f"verified on the nodes of ProvisioningRequest {name}: "
            + where(result.placements) + note,
            annotations={c.CONSUME_ANNOTATION: name, c.CLASS_ANNOTATION: cls})
    metrics.request("misfit" if result.verdict == "misfit" else "undecided")
    count_unused(rec, request, planned, set(), ready)
    shown = list(result.mismatches[:3]) or list(result.reasons[:2])
    if not ready.complete:
        shown.insert(0, f"after waiting {int(waited)}s: " + "; ".join(ready.waiting))
    if result.verdict == "undecided":
        text = (f"fitgate could not decide within its work budget on the nodes of "
                f"ProvisioningRequest {name}: " + "; ".join(shown))
        verdict = rec.retry(entry, "configuration", text)
    else:
        text = (f"the new nodes of ProvisioningRequest {name} do not keep their shapes' "
                "promise: " + ("; ".join(shown) or "the gang does not fit them")
                + f" ({len(result.mismatches)} differences)")
        verdict = rec.retry(entry, "coordination", text)
    wait = await rec.sync_status(wl, entry, verdict)
    if result.verdict == "misfit":
        await rec.recorder.record(wl, "Warning", "ProvisionedNodesMisfit",
                                   verdict.message, action="Verify")
        await sync_shape_mismatches(rec, wl, name, planned, result, ready)
    await delete_request(rec, request, "misfit")
    return wait


def count_unused(rec: Rec, request: Mapping[str, Any], planned: fitcore.Plan, used: set[str],
                  ready: readiness.NodeReadiness | None = None) -> None:
    cond = kueue.condition(request, c.PROVISIONED)
    if cond is None or cond.get("status") != "True":
        return
    since = predicates.parse_time(cond.get("lastTransitionTime"))
    if since is None:
        return
    seconds = max(0.0, (rec.clock.now() - since).total_seconds())
    ready = ready or rec.readiness(request, planned)
    for shape_name, nodes in ready.new_nodes.items():
        idle = [n for n in nodes if n not in used]
        if idle and seconds:
            metrics.UNUSED_NODE_SECONDS.labels(shape=shape_name).inc(seconds * len(idle))


async def sync_shape_mismatches(rec: Rec, wl: client.Obj, request: str, planned: fitcore.Plan,
                                result: fitcore.VerifyResult, ready: readiness.NodeReadiness
                                ) -> None:
    """Record on each planned NodeShape's status what its new nodes got wrong."""
    meta = _meta(wl)
    for shape_name in sorted({s.shape for s in planned.shapes}):
        mine = [d.message for d in result.details
                if d.code == fitcore.reasons.SHAPE_MISMATCH and d.shape == shape_name]
        if not mine:
            continue
        metrics.VERIFICATION_MISMATCHES.labels(shape=shape_name).inc(len(mine))
        obj = rec.stores.node_shapes.get(shape_name)
        if obj is None:
            continue
        have = ((obj.get("status") or {}).get("verification") or {}).get(
            "mismatchCount", 0)
        patch = {"status": {"verification": {
            "mismatchCount": (have if isinstance(have, int) else 0) + len(mine),
            "lastMismatch": {
                "time": predicates.timestamp(rec.clock.now()),
                "workload": f"{meta.get('namespace')}/{meta.get('name')}",
                "provisioningRequest": request,
                "nodes": ready.new_nodes.get(shape_name, []),
                "details": mine[:20]}}}}
        with contextlib.suppress(errors.NotFound):
            await rec.api.patch(kinds.NODE_SHAPE, shape_name, patch,
                                 subresource="status")


def requests_of(rec: Rec, wl: client.Obj, check: str | None = None) -> list[client.Obj]:
    """The Workload's ProvisioningRequests (of `check`): those fitgate wrote for it
    (`trusted`), and its own whose annotations do not read back (`sync_request` deletes
    them)."""
    meta = _meta(wl)
    uid = str(meta.get("uid", ""))
    unreadable: list[client.Obj] = []
    mine = [r.obj for r in rec.ledger.requests_of(str(meta.get("namespace") or ""), uid,
                                                  unreadable)
            if r.workload_uid == uid and (check is None or r.check == check)]
    return mine + [r for r in unreadable
                   if (_meta(r).get("labels") or {}).get(c.WORKLOAD_UID_LABEL) == uid
                   and (check is None or (_meta(r).get("labels") or {}).get(c.CHECK_LABEL)
                        == provisioning.label_value(check))]


async def cleanup_requests(rec: Rec, namespace: str, name: str, keep_uid: str | None,
                           uid: str | None, requests: Sequence[client.Obj],
                           templates: Sequence[client.Obj]) -> None:
    """Delete fitgate's requests and templates for the Workload `namespace/name`
    except those of the live Workload `keep_uid` (None: delete them all). `requests` and
    `templates`: the namespace's that may be the Workload's (`requests.WorkloadObjects`);
    each is checked here."""
    wanted = f"{namespace}/{name}"
    for r in requests:
        meta = _meta(r)
        labels = meta.get("labels") or {}
        if labels.get(c.MANAGED_LABEL) != "fitgate" or meta.get("namespace") != namespace:
            continue
        if (meta.get("annotations") or {}).get(c.WORKLOAD_ANNOTATION) != wanted and \
                (not uid or labels.get(c.WORKLOAD_UID_LABEL) != uid):
            continue
        if keep_uid is not None and labels.get(c.WORKLOAD_UID_LABEL) == keep_uid:
            continue
        await delete_request(rec, r, "workload gone, finished or evicted")
    for t in templates:
        meta = _meta(t)
        labels = meta.get("labels") or {}
        if labels.get(c.MANAGED_LABEL) != "fitgate" or meta.get("namespace") != namespace \
                or labels.get(c.WORKLOAD_NAME_LABEL) != provisioning.label_value(name):
            continue
        if keep_uid is not None and labels.get(c.WORKLOAD_UID_LABEL) == keep_uid:
            continue
        await delete(rec, kinds.POD_TEMPLATE, meta["name"], namespace)


async def delete_request(rec: Rec, request: Mapping[str, Any], why: str) -> None:
    meta = _meta(request)
    namespace = str(meta.get("namespace"))
    if await delete(rec, kinds.PROVISIONING_REQUEST, str(meta["name"]), namespace):
        metrics.request("deleted")
        log.info("deleted ProvisioningRequest", request=meta["name"], why=why)
    for t in provisioning.template_names(request):
        await delete(rec, kinds.POD_TEMPLATE, t, namespace)


async def delete(rec: Rec, kind: kinds.Kind, name: str, namespace: str) -> bool:
    try:
        await rec.api.delete(kind, name, namespace)
        return True
    except errors.NotFound:
        return False


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def where(placements: Sequence[fitcore.Placement]) -> str:
    """"N pods on M nodes (a, b, c, d and K more)"."""
    nodes = sorted({p.node for p in placements})
    shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    return f"{len(placements)} pods on {len(nodes)} nodes ({shown})"
