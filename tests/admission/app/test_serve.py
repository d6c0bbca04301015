"""The serve lifecycle over the project's FakeClient, on loopback: readiness waits for the
informers, the AdmissionCheck turns Active under the leader, /metrics serves, shutdown
releases the Lease."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable

import aiohttp

from admission import config, context
from admission.app import serve
from admission.kube import errors, fake, kinds
from tests.admission import waits


async def _until(pred: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    await waits.until(pred, what, timeout, interval=0.01)


def _cfg(**kw: object) -> config.Config:
    return config.load(env={}, flags={"health_address": "127.0.0.1", "health_port": 0,
                                      "identity": "replica-1", "retry_period": 0.05,
                                      "renew_deadline": 0.5, "lease_duration": 1,
                                      "kube_version": "1.37", **kw})


async def _get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, await r.text()


async def test_serve_lifecycle() -> None:
    api = fake.FakeClient()
    api.seed(kinds.ADMISSION_CHECK, {"metadata": {"name": "fit"},
                                     "spec": {"controllerName": "fitgate.io/topology-fit"}})
    # The Workload CRD is "not installed" for a while: readiness waits for it.
    api.fail_next(errors.NotFound("the server could not find the requested resource"),
                  verb="list", kind=kinds.WORKLOAD, times=1)
    svc = serve.Service(_cfg(), api)
    for inf in svc.informers.informers.values():
        inf.backoff = serve.cache.Backoff(base=0.01, ceiling=0.3, jitter=0)
    stop = asyncio.Event()
    gc.unfreeze()
    task = asyncio.create_task(svc.run(stop))
    await _until(lambda: svc.health_port, "the health server")
    assert svc.health_port
    assert (await _get(svc.health_port, "/healthz"))[0] == 200
    await _until(lambda: svc.serving, "informers ready and servers started")
    status, body = await _get(svc.health_port, "/readyz")
    assert status == 200
    ready = json.loads(body)
    assert ready["informers"]["Workload"] == "synced"
    assert set(ready["informers"]) == {s.kind.kind for s in serve.cache.SERVE}
    # The initial list is moved out of the collector's sight once the inventory has it.
    assert gc.get_freeze_count() > 0

    def active() -> str | None:
        check = api.find(kinds.ADMISSION_CHECK, "fit")
        conds = (check or {}).get("status", {}).get("conditions", [])
        return next((c["status"] for c in conds if c["type"] == "Active"), None)

    await _until(lambda: active() == "True", "Active=True on the check")
    held = api.find(kinds.LEASE, "fitgate", "fitgate-system")
    assert held is not None and held["spec"]["holderIdentity"] == "replica-1"
    status, metrics = await _get(svc.health_port, "/metrics")
    assert status == 200 and 'fitgate_reconcile_total{controller="admissioncheck"' in metrics
    assert 'fitgate_informer_synced{kind="Workload"} 1.0' in metrics
    assert 'fitgate_informer_lists_total{kind="Workload"}' in metrics
    stop.set()
    await asyncio.wait_for(task, 5)
    released = api.find(kinds.LEASE, "fitgate", "fitgate-system")
    assert released is not None and released["spec"]["holderIdentity"] == ""


async def test_not_ready_until_every_server_listens() -> None:
    listening = asyncio.Event()

    class SlowServer:  # a webhook whose site takes a while to listen
        async def start(self) -> None:
            await listening.wait()

        async def stop(self) -> None:
            pass

    api = fake.FakeClient()
    svc = serve.Service(_cfg(), api, factories=[
        lambda ctx: context.Component(servers=[SlowServer()])])
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(stop))
    try:
        await _until(lambda: svc.health_port and svc.informers.ready, "informers ready")
        assert svc.health_port
        status, body = await _get(svc.health_port, "/readyz")
        assert status == 503
        assert json.loads(body)["servers"] == "not started"
        listening.set()
        await _until(lambda: svc.serving, "the server started")
        status, body = await _get(svc.health_port, "/readyz")
        assert status == 200 and json.loads(body)["servers"] == "listening"
    finally:
        listening.set()
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_not_ready_while_a_required_kind_is_missing() -> None:
    api = fake.FakeClient()
    api.fail_next(errors.NotFound("not found"), verb="list", kind=kinds.WORKLOAD, times=1000)
    svc = serve.Service(_cfg(), api, factories=[])
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(stop))
    await _until(lambda: svc.health_port, "the health server")
    assert svc.health_port
    await _until(lambda: "not served" in svc.informers.status()["Workload"], "the report")
    status, body = await _get(svc.health_port, "/readyz")
    assert status == 503
    assert "workloads.kueue.x-k8s.io is not served" in json.loads(body)["informers"][
        "Workload"]
    assert api.find(kinds.LEASE, "fitgate", "fitgate-system") is None  # no campaign yet
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_leader_only_controllers_stop_when_the_lease_is_lost_and_resume() -> None:
    api = fake.FakeClient()
    svc = serve.Service(_cfg(), api)
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(stop))
    queue = svc.runtime.queues["admissioncheck"]
    await _until(lambda: queue.running, "the leader-only controller running")
    assert svc.elector is not None and svc.elector.is_leader
    # The API refuses every Lease call for longer than renew_deadline (0.5 s).
    api.fail_next(errors.ApiError(0, "Unreachable", "partitioned"), kind=kinds.LEASE,
                  times=1000)
    await _until(lambda: not queue.running, "the controller stopped with the Lease lost")
    assert not svc.elector.is_leader
    api.clear_failures()  # the partition heals
    await _until(lambda: queue.running, "the controller running again")
    assert svc.elector.transitions == 2
    stop.set()
    await asyncio.wait_for(task, 5)
