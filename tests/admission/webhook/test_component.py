"""The webhook and the gate inside `fitgate serve` (the component), over the project's
FakeClient: the webhook answers over TLS once the caches are synced, and the leader's gate
ungates a Job whose gang fits."""

from __future__ import annotations

import asyncio
import json
import pathlib
import ssl
from collections.abc import Callable

import aiohttp

from admission import config, context
from admission.app import serve
from admission.gate import predicates as gating
from admission.kube import fake, kinds
from admission.webhook import component
from tests.admission import builders as ab
from tests.admission import waits
from tests.gang import builders as gb


async def _until(pred: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    await waits.until(pred, what, timeout, interval=0.02)


async def test_serve_runs_the_webhook_and_the_gate(tmp_path: pathlib.Path) -> None:
    _, _, pem = ab.tls_pair(tmp_path)
    api = fake.FakeClient()
    job = ab.job(annotations={gating.GATED_BY: gating.GATE})
    for obj in ab.flatten([ab.queued("topo-fit"), ab.cluster(2),
                           gb.template("gpus", gpus=4, namespace=ab.NS), ab.workload_of(job)]):
        api.seed(kinds.BY_NAME[obj["kind"]], obj)
    api.seed(kinds.JOB, job)
    cfg = config.load(env={}, flags={"health_address": "127.0.0.1", "health_port": 0,
                                     "webhook_address": "127.0.0.1", "webhook_port": 0,
                                     "cert_dir": str(tmp_path),
                                     "leader_election": False, "kube_version": "1.37"})
    svc = serve.Service(cfg, api, factories=[component.component])
    stop = asyncio.Event()
    task = asyncio.create_task(svc.run(stop))
    try:
        [webhook] = svc.servers
        assert isinstance(webhook, component.WebhookServer)
        await _until(lambda: webhook.addresses, "the webhook server")
        port = webhook.addresses[0][1]
        ctx = ssl.create_default_context(cadata=pem.decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
            async with s.get(f"https://127.0.0.1:{port}/readyz") as r:
                assert r.status == 200
            async with s.post(f"https://127.0.0.1:{port}/mutate-jobs",
                              data=json.dumps(ab.review(ab.job("new")))) as r:
                body = await r.json()
        assert body["response"]["patchType"] == "JSONPatch"

        def gated() -> bool:
            found = api.find(kinds.JOB, "train", ab.NS)
            return gating.GATED_BY in ((found or {}).get("metadata", {}).get("annotations")
                                       or {})
        await _until(lambda: not gated(), "the gate to remove its entry from the Job")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def test_the_gate_and_the_check_share_one_idle_engine() -> None:
    """One engine over the idle cluster per process: the check and the gate (and the
    webhook, when it decides in threads) ask the same one."""
    from admission.check import workload
    from admission.gate import reconciler as gate

    captured: list[context.Component] = []

    def keep(factory: context.Factory) -> context.Factory:
        def wrapped(ctx: context.Context) -> context.Component:
            captured.append(factory(ctx))
            return captured[-1]
        return wrapped

    cfg = config.load(env={}, flags={"leader_election": False, "kube_version": "1.37"})
    serve.Service(cfg, fake.FakeClient(),
                  factories=[keep(workload.component), keep(component.component)])
    controllers = [c for part in captured for c in part.controllers]
    [gate_] = [c for c in controllers if isinstance(c, gate.GateController)]
    [check] = [c for c in controllers if isinstance(c, workload.WorkloadReconciler)]
    assert check.idle is not None and check.idle is gate_.engine
