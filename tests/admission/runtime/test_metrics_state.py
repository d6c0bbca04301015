"""The state gauges and the jobs-held counter of admission.runtime.metrics (#21 item 3): read from
the caches at scrape time, and set where the state lives (serve's leadership, the webhook
server's certificate, validate-jobs, the gate)."""

from __future__ import annotations

import asyncio
import datetime
import pathlib
from typing import Any

import prometheus_client
from cryptography import x509

from admission import constants as c
from admission.app import serve
from admission.kube import fake, kinds, store
from admission.runtime import metrics
from admission.webhook import server
from tests.admission import builders as ab
from tests.admission.app.test_serve import _cfg, _until
from tests.admission.gate.test_reconciler import World
from tests.admission.webhook.test_review import guarded, hooks, request
from tests.gang import builders as gb

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)


def value(name: str, **labels: str) -> float | None:
    return prometheus_client.REGISTRY.get_sample_value(name, labels)


def workload(name: str, check: str, state: str, since: str | None,
             finished: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": check, "state": state}
    if since:
        entry["lastTransitionTime"] = since
    conditions = [{"type": c.FINISHED, "status": "True"}] if finished else []
    return {"metadata": {"name": name, "namespace": "ns"},
            "status": {"admissionChecks": [entry], "conditions": conditions}}


def request_obj(name: str, *conditions: str, ours: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns",
                         "labels": {c.MANAGED_LABEL: "fitgate" if ours else "kueue"}},
            "status": {"conditions": [{"type": t, "status": "True"} for t in conditions]}}


CHECKS = [ab.admission_check("fit"), ab.admission_check("other", controller="x.io/y")]
WORKLOADS = [
    workload("a", "fit", "Pending", "2026-12-04T11:00:00Z"),      # 3600 s
    workload("b", "fit", "Pending", "2026-12-04T11:50:00Z"),      # 600 s
    workload("c", "fit", "Ready", "2026-12-04T08:00:00Z"),
    workload("d", "fit", "Pending", "2026-12-04T01:00:00Z", finished=True),
    workload("e", "other", "Pending", "2026-12-04T01:00:00Z"),
]


def test_pending_checks_count_only_fitgates_unfinished_pending_checks() -> None:
    assert metrics.pending_checks(WORKLOADS, CHECKS, NOW.timestamp()) == (2, 3600.0)
    assert metrics.pending_checks([], CHECKS, NOW.timestamp()) == (0, 0.0)


def test_requests_in_flight_are_fitgates_unanswered_requests() -> None:
    requests = [request_obj("new"), request_obj("accepted", "Accepted"),
                request_obj("done", "Provisioned"), request_obj("failed", "Failed"),
                request_obj("kueues", ours=False)]
    assert metrics.requests_in_flight(requests) == 2


def test_the_collector_reads_the_caches_at_each_scrape() -> None:
    workloads, checks, requests = (store.Store(kinds.WORKLOAD), store.Store(kinds.ADMISSION_CHECK),
                                   store.Store(kinds.PROVISIONING_REQUEST))
    for obj in CHECKS:
        checks.seed(obj)
    metrics.STATE.watch(workloads, checks, requests, lambda: NOW.timestamp())
    try:
        assert value("fitgate_checks_pending") == 0
        for obj in WORKLOADS:
            workloads.seed(obj)
        requests.seed(request_obj("new"))
        assert value("fitgate_checks_pending") == 2
        assert value("fitgate_oldest_pending_check_seconds") == 3600
        assert value("fitgate_provisioning_requests_in_flight") == 1
    finally:
        metrics.STATE.__init__()  # type: ignore[misc]


def test_serving_certificate_expiry_is_set_on_load_and_reload(tmp_path: pathlib.Path) -> None:
    cert, key, _ = ab.tls_pair(tmp_path, days=1)
    loaded = server.Certificates(str(cert), str(key))
    want = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc
    assert value("fitgate_serving_certificate_expiry_timestamp_seconds") == want.timestamp()
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    cert2, key2, _ = ab.tls_pair(renewed, days=30)
    cert.write_bytes(cert2.read_bytes())
    key.write_bytes(key2.read_bytes())
    assert loaded.reload_if_changed()
    later = x509.load_pem_x509_certificate(cert2.read_bytes()).not_valid_after_utc
    assert value("fitgate_serving_certificate_expiry_timestamp_seconds") == later.timestamp()
    assert later > want


async def test_leader_and_build_info_follow_the_lease() -> None:
    api = fake.FakeClient()
    svc = serve.Service(_cfg(kube_version="1.36"), api)
    assert value("fitgate_build_info", version=metrics.version(), kubernetes="1.36") == 1
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(stop))
    await _until(lambda: svc.elector is not None and svc.elector.is_leader, "leading")
    await _until(lambda: value("fitgate_leader") == 1, "fitgate_leader 1")
    stop.set()
    await asyncio.wait_for(task, 5)
    assert value("fitgate_leader") == 0


async def test_the_gate_counts_a_held_job_once_per_verdict() -> None:
    before = value("fitgate_jobs_held_total", hook="gate", reason="configuration") or 0
    w = World(gb.shape("h100-rail"), template_gpus=6)
    await w.reconcile()
    await w.reconcile()  # the same verdict: not counted again
    assert value("fitgate_jobs_held_total", hook="gate", reason="configuration") == before + 1


async def test_validate_jobs_counts_a_refused_job() -> None:
    before = value("fitgate_jobs_held_total", hook="validate-jobs",
                   reason="configuration") or 0
    deny = ab.fit_policy("strict", enforcement="deny")
    h = hooks(guarded(gb.template("gpus", gpus=6, namespace=ab.NS), deny))
    response = await h.review("validate-jobs", request(ab.job()))
    assert not response.allowed
    assert value("fitgate_jobs_held_total", hook="validate-jobs",
                 reason="configuration") == before + 1
