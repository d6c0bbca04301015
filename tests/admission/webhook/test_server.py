"""AdmissionReview round trips through the real aiohttp server over TLS on loopback:
allowed, patched, warned, denied; health; refused bodies; certificate rotation."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from admission.engine import fitting
from admission.gate import predicates as gating
from admission.webhook import review, server
from tests.admission import builders as ab
from tests.gang import builders as gb


class Served:
    def __init__(self, url: str, session: aiohttp.ClientSession,
                 certificates: server.Certificates, tmp: pathlib.Path) -> None:
        self.url = url
        self.session = session
        self.certificates = certificates
        self.tmp = tmp

    async def post(self, hook: str, body: Any, *, raw: bytes | None = None
                   ) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.session.post(f"{self.url}/{hook}", data=data,
                                     headers={"Content-Type": "application/json"}) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text


@pytest.fixture
async def served(tmp_path: pathlib.Path) -> AsyncIterator[Served]:
    objects = [ab.queued("topo-fit"), ab.cluster(2), gb.template("gpus", gpus=4, namespace=ab.NS),
               gb.template("huge", gpus=6, namespace=ab.NS),
               ab.namespace("strict", tier="strict"),
               ab.local_queue("q", "gpu", ns="strict"),
               ab.fit_policy("strict", subjects={"namespaceSelector": {
                   "matchLabels": {"tier": "strict"}}}, enforcement="deny"),
               gb.template("huge", gpus=6, namespace="strict")]
    stores = ab.stores(objects)
    # Round trips of verdicts: wait for each decision (the budget has its own tests).
    hooks = review.Hooks(stores, fitting.StoreEngine(stores),
                         config=review.Config(decision_budget_seconds=30))
    cert, key, pem = ab.tls_pair(tmp_path)
    certificates = server.Certificates(str(cert), str(key))
    app = server.init(hooks, server.Settings(max_body_bytes=256 * 1024, reload_interval=0.05))
    client_ctx = ssl.create_default_context(cadata=pem.decode())
    async with server.serving(app, "127.0.0.1", 0, certificates) as addresses:
        port = addresses[0][1]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as s:
            yield Served(f"https://127.0.0.1:{port}", s, certificates, tmp_path)


def response_of(body: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == uid
    out: dict[str, Any] = body["response"]
    return out


async def test_allowed_round_trip(served: Served) -> None:
    status, body = await served.post("validate-jobs", ab.review(ab.job()))
    assert status == 200
    # The audit annotation says how it was answered (the API server logs it).
    assert response_of(body) == {"uid": "uid-1", "allowed": True,
                                 "auditAnnotations": {"fit-check": "decided"}}


async def test_patched_round_trip(served: Served) -> None:
    status, body = await served.post("mutate-jobs", ab.review(ab.job(), uid="u-2"))
    r = response_of(body, "u-2")
    assert status == 200 and r["allowed"] and r["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(r["patch"])) == [
        {"op": "add", "path": "/metadata/annotations",
         "value": {gating.GATED_BY: gating.GATE}}]


async def test_warned_round_trip(served: Served) -> None:
    status, body = await served.post("validate-jobs",
                                     ab.review(ab.job(templates=("huge",))))
    r = response_of(body)
    assert status == 200 and r["allowed"] is True
    assert any("can never be admitted" in w for w in r["warnings"])


async def test_denied_round_trip(served: Served) -> None:
    job = ab.job(ns="strict", templates=("huge",))
    status, body = await served.post("validate-jobs", ab.review(job, namespace="strict"))
    r = response_of(body)
    assert status == 200 and r["allowed"] is False
    assert r["status"]["code"] == 403
    assert "Job strict/train can never be admitted" in r["status"]["message"]


async def test_health_and_readiness(served: Served) -> None:
    for path in ("healthz", "readyz"):
        async with served.session.get(f"{served.url}/{path}") as r:
            assert r.status == 200 and await r.text() == "ok"


MALFORMED = [
    ("not json", b"{", "body is not JSON"),
    ("a list", b"[]", "not an AdmissionReview v1"),
    ("wrong apiVersion", json.dumps({**ab.review(ab.job()),
                                     "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
     "apiVersion"),
    ("no uid", json.dumps({**ab.review(ab.job()), "request": {
        k: v for k, v in ab.review(ab.job())["request"].items() if k != "uid"}}).encode(),
     "request.uid"),
    ("object not a map", json.dumps({**ab.review(None), "request": {
        **ab.review(None)["request"], "object": [1, 2]}}).encode(), "request.object"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "not"),
]


@pytest.mark.parametrize(("raw", "reason"), [c[1:] for c in MALFORMED],
                         ids=[c[0] for c in MALFORMED])
async def test_malformed_reviews_get_400_with_a_reason(served: Served, raw: bytes,
                                                        reason: str) -> None:
    status, body = await served.post("mutate-jobs", None, raw=raw)
    assert status == 400
    assert body["code"] == 400 and reason in body["message"]


async def test_oversized_bodies_are_refused_with_413(served: Served) -> None:
    job = ab.job()
    job["metadata"]["annotations"] = {"big": "x" * (300 * 1024)}
    status, _ = await served.post("mutate-jobs", ab.review(job))
    assert status == 413
    # and the server keeps serving
    status, _ = await served.post("mutate-jobs", ab.review(ab.job()))
    assert status == 200


async def test_a_rotated_certificate_is_served_to_new_connections(served: Served) -> None:
    rotated = served.tmp / "rotated"
    rotated.mkdir()
    cert, key, pem = ab.tls_pair(rotated, common_name="fitgate-rotated")
    trusts_new_only = ssl.create_default_context(cadata=pem.decode())

    async def handshake() -> bool:
        conn = aiohttp.TCPConnector(ssl=trusts_new_only, force_close=True)
        async with aiohttp.ClientSession(connector=conn) as s:
            try:
                async with s.get(f"{served.url}/healthz") as r:
                    return r.status == 200
            except aiohttp.ClientConnectorCertificateError:
                return False

    assert not await handshake()
    os.replace(cert, served.certificates.cert_file)
    os.replace(key, served.certificates.key_file)
    for _ in range(100):  # the watcher checks every 0.05 s
        if served.certificates.reloads:
            break
        await asyncio.sleep(0.05)
    assert served.certificates.reloads == 1
    assert await handshake()


def test_a_half_written_pair_keeps_the_old_certificate(tmp_path: pathlib.Path) -> None:
    cert, key, _ = ab.tls_pair(tmp_path)
    certificates = server.Certificates(str(cert), str(key))
    cert.write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    os.utime(cert, ns=(1, 1))
    assert not certificates.reload_if_changed()
    assert certificates.reloads == 0
