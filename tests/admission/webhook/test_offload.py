"""Large requests are read off the event loop (issue #20 item 8): while a large Job's
review is being parsed or read, `/healthz` and the pod hook are answered. The step under
test is held (a threading.Event) until the small requests are answered, so the test
asserts the order in which requests complete, never how long they took: on the loop,
the held step would hold every other request behind it."""

from __future__ import annotations

import asyncio
import json
import pathlib
import ssl
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from admission.engine import fitting
from admission.webhook import review, server
from tests.admission import builders as ab


def large_job() -> dict[str, Any]:
    job = ab.job()
    job["metadata"]["annotations"] = {"notes": "x" * (200 * 1024)}
    return job


def held(fn: Callable[..., Any], started: threading.Event, release: threading.Event
         ) -> Callable[..., Any]:
    """`fn`, made to wait for `release` (at most 10 s: bounded) on its first call."""
    def wrapper(*args: Any) -> Any:
        if not started.is_set():
            started.set()
            release.wait(10)
        return fn(*args)
    return wrapper


@pytest.mark.parametrize("step", ["parse", "read"])
async def test_small_requests_are_answered_while_a_large_one_is_read(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    started, release = threading.Event(), threading.Event()
    if step == "parse":
        monkeypatch.setattr(server, "parse", held(server.parse, started, release))
    else:
        monkeypatch.setattr(fitting, "read_gang", held(fitting.read_gang, started, release))
    stores = ab.stores([*ab.queued("topo-fit"), *ab.cluster(1)])
    hooks = review.Hooks(stores, fitting.StoreEngine(stores),
                         config=review.Config(decision_budget_seconds=30, budget_seconds=30))
    cert, key, pem = ab.tls_pair(tmp_path)
    app = server.init(hooks, server.Settings())
    done: list[str] = []
    async with server.serving(app, "127.0.0.1", 0,
                              server.Certificates(str(cert), str(key))) as addresses:
        url = f"https://127.0.0.1:{addresses[0][1]}"
        tls = ssl.create_default_context(cadata=pem.decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls)) as s:

            async def post(name: str, hook: str, body: Any) -> int:
                async with s.post(f"{url}/{hook}", data=json.dumps(body).encode(),
                                  headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                done.append(name)
                return r.status

            async def get(name: str, path: str) -> int:
                async with s.get(f"{url}/{path}") as r:
                    await r.read()
                done.append(name)
                return r.status

            large = asyncio.create_task(post("large", "validate-jobs", ab.review(large_job())))
            assert await asyncio.to_thread(started.wait, 30)  # the large one is held
            pod = ab.review({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": "p", "namespace": ab.NS}, "spec": {}},
                            group="", kind="Pod", resource="pods")
            assert await get("healthz", "healthz") == 200
            assert await post("pod", "mutate-pods", pod) == 200
            assert await post("small job", "mutate-jobs", ab.review(ab.job())) == 200
            release.set()
            assert await large == 200
    assert done == ["healthz", "pod", "small job", "large"]


def test_small_bodies_stay_on_the_loop() -> None:
    hooks = review.Hooks({}, fitting.StoreEngine({}))
    assert not hooks.offload.large(4096) and hooks.offload.large(200 * 1024)
