"""Prometheus metrics of the admission check (prometheus_client, default registry).

Every metric is named `fitgate_*` and labelled only by small closed sets (verdict,
category, outcome, operation) or by NodeShape name (few per cluster), never by workload.
The HTTP endpoint that serves the default registry is `fitgate serve`'s.

- `fitgate_decisions_total{verdict, category}`: check decisions written (verdict: the
  check state, Ready, Pending, Retry or Rejected; category: capacity, configuration,
  coordination or none).
- `fitgate_quota_to_ready_seconds`: from the Workload's QuotaReserved transition to fitgate
  marking its check Ready.
- `fitgate_provisioning_requests_total{outcome}`: requests created; verified (the new
  nodes fit), misfit or undecided after provisioning; failed, booking-expired,
  capacity-revoked; timed-out (neither Provisioned nor Failed within
  `provisioning_timeout`); deleted.
- `fitgate_verification_mismatches_total{shape}`: differences found between a new node and
  what its shape promised.
- `fitgate_unused_node_seconds_total{shape}`: node-seconds provisioned for a gang and not
  used by it: for a request given up after its nodes came (misfit, booking expired,
  capacity revoked), every new node from the Provisioned transition to that moment; for a
  verified request, the new nodes of the plan's shapes the gang's placement left empty.
- `fitgate_decision_seconds{operation}`: fitcore's time per plan, verify or fit.
- `fitgate_promise_waits_total`: check passes that left a gang waiting because it fits
  only on nodes promised to gangs whose pods have not bound yet (it is looked at again
  after `promise_poll_seconds`).
- `fitgate_webhook_review_seconds{hook}`: the webhook's time per review (mutate-jobs,
  validate-jobs, mutate-pods), from the parsed request to the response.
- `fitgate_webhook_validations_total{outcome}`: how validate-jobs answered: `cached` (a
  verdict for the same spec and cluster state), `decided` (within the decision budget),
  `deferred` (allowed unchecked; the decision finishes in the background and the next
  review of the spec is answered from the cache), `skipped` (allowed unchecked: the
  bounded queue of decisions was full), `unavailable` (allowed unchecked: the decision
  process is being replaced), `unreadable`, `failed` (an engine error),
  `timed-out` (the whole review's budget).
- `fitgate_jobs_held_total{hook, reason}`: jobs fitgate refused or held: hook
  `validate-jobs` (refused at CREATE, FitPolicy enforcement deny) or `gate` (held before
  quota, counted when its verdict on the job changes); reason `configuration` (no node
  and no shape can host the gang), `capacity` (not within the shapes' limits) or
  `policy` (its FitPolicy forbids every node and shape that could host it).

State gauges, for alerts (the chart's PrometheusRule) and the dashboard:

- `fitgate_checks_pending`: Workloads whose fitgate check is Pending (quota reserved,
  not yet Ready, Retry or Rejected), from the replica's Workload cache.
- `fitgate_oldest_pending_check_seconds`: how long the oldest of them has been Pending
  (since its check's lastTransitionTime); 0 when none is.
- `fitgate_provisioning_requests_in_flight`: ProvisioningRequests fitgate created that
  are neither Provisioned nor Failed yet (the autoscaler has not answered).
- `fitgate_leader`: 1 on the replica holding the leader-election Lease (or on the only
  replica when leader election is off), 0 on the others.
- `fitgate_build_info{version, kubernetes}`: 1, labelled by fitgate's version and the
  Kubernetes minor whose scheduler it follows.
- `fitgate_serving_certificate_expiry_timestamp_seconds`: notAfter of the webhook's
  serving certificate as last loaded, in seconds since the epoch.

The first three are computed at each scrape from the caches (`StateCollector`),
so they are right after a restart and on every replica.

Defined next to what they measure:

- `admission.runtime.workqueue`: `fitgate_reconcile_total{controller, result}` (ok, requeue,
  error), `fitgate_reconcile_seconds{controller}`, `fitgate_workqueue_depth{controller}`,
  `fitgate_workqueue_wait_seconds{controller}` (from a key's due time to its reconcile's
  start: the wait for a worker), `fitgate_workqueue_adds_total{controller, cause, outcome}`
  (keys offered to a queue: the kind of the event that named them or requeue/retry/again,
  and whether the add queued, merged with a waiting key, or ran the key again after).
- `admission.runtime.collector`: `fitgate_gc_freezes_total` (full collections whose
  survivors were frozen), `fitgate_gc_full_collection_seconds` (each full collection).
- `admission.kube.cache`: `fitgate_informer_synced{kind}` (1 once the kind's cache has
  listed), `fitgate_informer_lists_total{kind}`, `fitgate_informer_reconnects_total{kind}`,
  `fitgate_informer_events_total{kind}`.
- `admission.engine.inventory`: `fitgate_inventory_event_seconds`,
  `fitgate_inventory_apply_seconds`, `fitgate_inventory_decision_seconds{decision}`,
  `fitgate_inventory_abandoned_decisions_total` (decisions given up past their deadline,
  left to finish on their own engine).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from admission import constants as c

DECISIONS = Counter("fitgate_decisions", "Admission check decisions written",
                    ["verdict", "category"])
QUOTA_TO_READY = Histogram(
    "fitgate_quota_to_ready_seconds",
    "Time from a Workload's quota reservation to fitgate marking its check Ready",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200))
PROVISIONING_REQUESTS = Counter("fitgate_provisioning_requests",
                                "ProvisioningRequests by outcome", ["outcome"])
VERIFICATION_MISMATCHES = Counter(
    "fitgate_verification_mismatches",
    "Differences between new nodes and what their NodeShape promised", ["shape"])
UNUSED_NODE_SECONDS = Counter(
    "fitgate_unused_node_seconds",
    "Node-seconds provisioned for a gang and not used by it", ["shape"])
PROMISE_WAITS = Counter(
    "fitgate_promise_waits",
    "Check passes that waited for nodes promised to gangs whose pods have not bound")
DECISION_SECONDS = Histogram(
    "fitgate_decision_seconds", "fitcore decision latency", ["operation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))

WEBHOOK_REVIEW_SECONDS = Histogram(
    "fitgate_webhook_review_seconds", "Webhook time per review, parsed request to response",
    ["hook"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 2))
WEBHOOK_VALIDATIONS = Counter(
    "fitgate_webhook_validations",
    "validate-jobs answers by outcome (cached, decided, deferred, skipped, ...)", ["outcome"])


def decision(verdict: str, category: str | None) -> None:
    DECISIONS.labels(verdict=verdict, category=category or "none").inc()


def request(outcome: str) -> None:
    PROVISIONING_REQUESTS.labels(outcome=outcome).inc()

JOBS_HELD = Counter("fitgate_jobs_held", "Jobs fitgate refused at CREATE or held before quota",
                    ["hook", "reason"])
LEADER = Gauge("fitgate_leader", "1 on the replica holding the leader-election Lease")
BUILD_INFO = Gauge("fitgate_build_info", "fitgate's version and the Kubernetes minor it follows",
                   ["version", "kubernetes"])
CERT_EXPIRY = Gauge("fitgate_serving_certificate_expiry_timestamp_seconds",
                    "notAfter of the webhook's serving certificate, seconds since the epoch")


def job_held(hook: str, reason: str) -> None:
    JOBS_HELD.labels(hook=hook, reason=reason).inc()


def version() -> str:
    """fitgate's installed version ("unknown" when run from an uninstalled tree)."""
    from importlib import metadata

    try:
        return metadata.version("fitgate")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_info(version: str, kubernetes: str) -> None:
    BUILD_INFO.clear()
    BUILD_INFO.labels(version=version, kubernetes=kubernetes).set(1)


def serving_certificate(cert_file: str) -> None:
    """Record the notAfter of the first certificate in a PEM file (unreadable: unchanged)."""
    from cryptography import x509

    try:
        with open(cert_file, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError):
        return
    not_after = cert.not_valid_after_utc
    CERT_EXPIRY.set(not_after.replace(tzinfo=datetime.UTC).timestamp())


# ------------------------------------------------------------------ state from the caches


class Listable(Protocol):
    def list(self, namespace: str | None = None) -> Iterable[Mapping[str, Any]]: ...


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    status = obj.get("status") or {}
    return any(isinstance(cond, Mapping) and cond.get("type") == kind
               and cond.get("status") == "True"
               for cond in status.get("conditions") or [])


def pending_checks(workloads: Iterable[Mapping[str, Any]],
                   admission_checks: Iterable[Mapping[str, Any]], now: float
                   ) -> tuple[int, float]:
    """(how many Workloads have a fitgate check Pending, seconds the oldest has been)."""
    ours = {str((ac.get("metadata") or {}).get("name")) for ac in admission_checks
            if (ac.get("spec") or {}).get("controllerName") == c.CONTROLLER_NAME}
    count, oldest = 0, 0.0
    for wl in workloads:
        if _true(wl, c.FINISHED):
            continue
        for entry in (wl.get("status") or {}).get("admissionChecks") or []:
            if not isinstance(entry, Mapping) or entry.get("name") not in ours \
                    or entry.get("state") != c.PENDING:
                continue
            count += 1
            since = _time(entry.get("lastTransitionTime"))
            if since is not None:
                oldest = max(oldest, now - since)
            break
    return count, oldest


def requests_in_flight(requests: Iterable[Mapping[str, Any]]) -> int:
    """fitgate's ProvisioningRequests the autoscaler has not answered (neither Provisioned
    nor Failed)."""
    return sum(1 for r in requests
               if ((r.get("metadata") or {}).get("labels") or {}).get(c.MANAGED_LABEL) == "fitgate"
               and not _true(r, c.PROVISIONED) and not _true(r, c.FAILED))


class StateCollector(Collector):
    """The state gauges, read from the caches at each scrape; zero until `watch` names
    the caches."""

    def __init__(self) -> None:
        self.workloads: Listable | None = None
        self.admission_checks: Listable | None = None
        self.requests: Listable | None = None
        self.now: Callable[[], float] = time.time

    def watch(self, workloads: Listable, admission_checks: Listable, requests: Listable,
              now: Callable[[], float] | None = None) -> None:
        self.workloads, self.admission_checks, self.requests = (
            workloads, admission_checks, requests)
        self.now = now or time.time

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count, oldest = 0, 0.0
        if self.workloads is not None and self.admission_checks is not None:
            count, oldest = pending_checks(self.workloads.list(),
                                           self.admission_checks.list(), self.now())
        in_flight = requests_in_flight(self.requests.list()) if self.requests else 0
        yield GaugeMetricFamily("fitgate_checks_pending",
                                "Workloads whose fitgate check is Pending", value=count)
        yield GaugeMetricFamily("fitgate_oldest_pending_check_seconds",
                                "Seconds the oldest Pending fitgate check has been Pending",
                                value=oldest)
        yield GaugeMetricFamily("fitgate_provisioning_requests_in_flight",
                                "fitgate's ProvisioningRequests neither Provisioned nor Failed",
                                value=in_flight)


STATE = StateCollector()
REGISTRY.register(STATE)
