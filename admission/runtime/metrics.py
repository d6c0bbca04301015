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
- `fitgate_webhook_review_seconds{hook}`: the webhook's time per review (mutate-jobs,
  validate-jobs, mutate-pods), from the parsed request to the response.
- `fitgate_webhook_validations_total{outcome}`: how validate-jobs answered: `cached` (a
  verdict for the same spec and cluster state), `decided` (within the decision budget),
  `deferred` (allowed unchecked; the decision finishes in the background and the next
  review of the spec is answered from the cache), `skipped` (allowed unchecked: the
  bounded queue of decisions was full), `unavailable` (allowed unchecked: the decision
  process is being replaced), `unreadable`, `failed` (an engine error),
  `timed-out` (the whole review's budget).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
