"""Webhook latency under load: AdmissionReviews over TLS on loopback at fixed rates.

    .venv/bin/python -m bench.webhook [--nodes 5000] [--rates 50,100,200,400,800]
                                      [--seconds 5] [--json PATH]

The server (`admission.webhook.server`, the same hooks `fitgate serve` runs) runs in a
child process with a realistic inventory in its stores: `--nodes` GPU nodes (16 GPUs on
two PCIe roots and a NIC per root each, racks of 40, a third of them running something on
one root), two NodeShapes, a LocalQueue → ClusterQueue that uses fitgate's check. The
load generator (this process) sends at a fixed rate, open loop: request i is due at
start + i/rate, and its latency counts from that moment (a slow server is not hidden by a
client that waits). Each rate runs `--seconds` seconds and at most 4,000 requests.

Three mixes per rate:
- `mutate`: CREATE of a Job (the gate annotation patch);
- `validate`: CREATE of Jobs (1-4 pods, each 4 GPUs and a NIC on one PCIe root) drawn
  from 20 job specs (teams submit the same few templates; the hooks share one decision
  per spec and cluster state);
- `validate-new`: every Job spec new (a CPU request never asked before), so every request
  runs the engine on the whole inventory; past `max_pending` waiting decisions the hooks
  answer at once with a "busy" warning (counted in the `busy` column).

Before measuring, one validation builds the engine's snapshot (reported), then two
seconds of each of the first two mixes at 50/s warm up connections and TLS sessions
(not measured). The table gives
p50 and p99 per rate and mix, and, per mix, the highest rate whose p99 is at most 20 ms.
Figures, not assertions: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import pathlib
import ssl
import statistics
import sys
import tempfile
import time
from typing import Any

import aiohttp

TARGET_P99_MS = 20.0
MAX_REQUESTS = 4000
NS = "team-a"


def inventory(nodes: int) -> list[dict[str, Any]]:
    import random

    from tests.admission import builders as ab
    from tests.fitcore import builders as b
    from tests.gang import builders as gb

    rng = random.Random(7)
    objects: list[dict[str, Any]] = [*gb.classes(), *ab.queued("topo-fit"),
                                     gb.template("gpus", gpus=4, namespace=NS),
                                     gb.shape("h100-rail", price=12),
                                     gb.shape("one-root", gpus=8, roots=1, price=20)]
    for i in range(nodes):
        name = f"gpu-{i:05d}"
        objects += gb.gpu_node(name, gpus=16, roots=2, rack=f"rack-{i // 40:03d}",
                               cpu="128")
        if rng.random() < 0.33:
            objects.append(gb.allocated(f"busy-{name}", name,
                                        [(b.GPU, f"gpu-{d}") for d in range(8)]
                                        + [(b.NIC, "nic-0")]))
    for obj in objects:  # claims in the inventory are namespaced like real ones
        if obj["kind"] == "ResourceClaim":
            obj["metadata"]["namespace"] = "other"
    return objects


def serve(nodes: int, cert: str, key: str, conn: multiprocessing.connection.Connection,
          freeze: bool) -> None:
    """The child process: the webhook server over the inventory, until told to stop."""
    import gc

    import structlog
    from aiohttp import web

    from admission import fitting
    from admission.webhook import review, server
    from tests.admission import builders as ab

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    started = time.perf_counter()
    stores = ab.stores(inventory(nodes))
    built = time.perf_counter() - started
    # As the service runs it: the hooks' engine plans on the idle cluster.
    engine = fitting.StoreEngine(stores, idle=True)
    hooks = review.Hooks(stores, engine)
    if freeze:  # the inventory lives as long as the process: keep it out of GC scans
        engine.plan(fitting.gang_of(job("warm", 1), stores))  # build the snapshot first
        gc.collect()
        gc.freeze()

    async def service_times() -> dict[str, float]:
        """CPU seconds per review in this process, without the network (median of 5
        rounds; `validate-new` includes the engine's decision in its thread): what the
        server pays per request, whatever the machine's load."""
        out = {}
        for mix, n in (("mutate", 100), ("validate", 100), ("validate-new", 10)):
            for i in range(20):  # every spec of `validate` decided once
                await server.answer(hooks, *body(mix, i))
            rounds = []
            for r in range(5):
                started = time.process_time()
                for i in range(n):
                    await server.answer(hooks, *body(mix, 3_000_000 + n * r + i))
                rounds.append((time.process_time() - started) / n)
            out[mix] = statistics.median(rounds)
        return out

    async def main() -> None:
        cpu = await service_times()
        app = server.init(hooks)
        served = 0

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            nonlocal served
            served += 1
            response: web.StreamResponse = await handler(request)
            return response

        app.middlewares.append(count)
        certs = server.Certificates(cert, key)
        async with server.serving(app, "127.0.0.1", 0, certs) as addresses:
            conn.send({"port": addresses[0][1], "stores_seconds": built, "cpu": cpu})
            started = time.process_time()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, conn.recv)  # the stop message
            conn.send({"requests": served, "cpu_seconds": time.process_time() - started})

    asyncio.run(main())


def job(name: str, parallelism: int, cpu: str = "8") -> dict[str, Any]:
    from tests.admission import builders as ab

    return ab.job(name, ns=NS, parallelism=parallelism, cpu=cpu)


def body(mix: str, i: int) -> tuple[str, bytes]:
    """A review of mix `mix`: Jobs of 1-8 pods of 4 GPUs and a NIC on one PCIe root; for
    `validate-new`, each with a CPU request never asked before."""
    from tests.admission import builders as ab

    if mix == "mutate":
        return "mutate-jobs", json.dumps(ab.review(job(f"m-{i}", 4), uid=f"u{i}")).encode()
    if mix == "validate":  # 20 distinct specs: 4 sizes × 5 CPU requests
        parallelism, cpu = 1 + i % 20 % 4, str(4 + i % 20 // 4)
    else:
        parallelism, cpu = 1 + i % 8, f"{8000 + i}m"
    return "validate-jobs", json.dumps(ab.review(job(f"v-{i}", parallelism, cpu),
                                                 uid=f"u{i}")).encode()


async def run_rate(session: aiohttp.ClientSession, url: str, mix: str, rate: float,
                   seconds: float, offset: int) -> dict[str, Any]:
    n = min(MAX_REQUESTS, int(rate * seconds))
    bodies = [body(mix, offset + i) for i in range(n)]
    latencies: list[float] = []
    errors = 0
    busy = 0

    async def one(due: float, hook: str, data: bytes) -> None:
        nonlocal errors, busy
        try:
            async with session.post(f"{url}/{hook}", data=data) as r:
                reply = await r.read()
                if r.status != 200:
                    errors += 1
                elif b"is busy" in reply or b"could not check" in reply:
                    busy += 1
        except (aiohttp.ClientError, TimeoutError):
            errors += 1
        latencies.append(time.perf_counter() - due)

    start = time.perf_counter() + 0.05
    tasks = []
    for i, (hook, data) in enumerate(bodies):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due, hook, data)))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=seconds + 60)
    wall = time.perf_counter() - start
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"mix": mix, "rate": rate, "requests": n, "errors": errors, "busy": busy,
            "achieved": round(n / wall, 1), "p50_ms": round(q[49] * 1e3, 2),
            "p99_ms": round(q[98] * 1e3, 2), "max_ms": round(latencies[-1] * 1e3, 2)}


async def load(port: int, pem: bytes, rates: list[float], seconds: float,
               mixes: list[str]) -> tuple[float, list[dict[str, Any]]]:
    ctx = ssl.create_default_context(cadata=pem.decode())
    url = f"https://127.0.0.1:{port}"
    rows = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=256),
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        started = time.perf_counter()
        hook, data = body("validate", 0)
        async with session.post(f"{url}/{hook}", data=data) as r:
            reply = await r.json()
        warm = time.perf_counter() - started
        assert reply["response"]["allowed"], reply
        # Warm up (connections, TLS sessions, first decisions), not measured.
        await run_rate(session, url, "mutate", 50, 2, 1_000_000)
        await run_rate(session, url, "validate", 50, 2, 2_000_000)
        offset = 1
        for mix in mixes:
            for rate in rates:
                row = await run_rate(session, url, mix, rate, seconds, offset)
                offset += row["requests"]
                rows.append(row)
                print(f"  {mix:13s} {rate:6.0f}/s  sent {row['requests']:5d}  achieved "
                      f"{row['achieved']:7.1f}/s  p50 {row['p50_ms']:8.2f} ms  p99 "
                      f"{row['p99_ms']:8.2f} ms  max {row['max_ms']:8.2f} ms  errors "
                      f"{row['errors']}  busy {row['busy']}", flush=True)
    return warm, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rates", default="50,100,200,400,800")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--mixes", default="mutate,validate,validate-new")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="move the filled stores out of the cyclic GC's scans (gc.freeze)")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    mixes = args.mixes.split(",")
    from tests.admission import builders as ab

    with tempfile.TemporaryDirectory() as tmp:
        cert, key, pem = ab.tls_pair(pathlib.Path(tmp))
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(args.nodes, str(cert), str(key), child,
                                                   args.gc_freeze),
                           daemon=True)
        proc.start()
        try:
            if not parent.poll(600):
                print("bench.webhook: the server did not start within 600 s",
                      file=sys.stderr)
                return 1
            ready = parent.recv()
            print(f"webhook over TLS on loopback; {args.nodes} nodes "
                  f"(stores filled in {ready['stores_seconds']:.1f} s)")
            print("  CPU per review in the server process, no network: " + ", ".join(
                f"{mix} {sec * 1e3:.2f} ms" for mix, sec in ready["cpu"].items()))
            warm, rows = asyncio.run(load(ready["port"], pem, rates, args.seconds, mixes))
            print(f"  first validation (builds the engine's snapshot): {warm * 1e3:.0f} ms")
        finally:
            parent.send("stop")
            if parent.poll(30):
                served = parent.recv()
                per = served["cpu_seconds"] / max(1, served["requests"])
                print(f"server process CPU over the run: {served['cpu_seconds']:.1f} s for "
                      f"{served['requests']} HTTPS reviews ({per * 1e3:.2f} ms each with TLS, "
                      f"HTTP and JSON; one core serves at most ~{1 / per:.0f}/s)")
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    print(f"highest rate with p99 <= {TARGET_P99_MS:g} ms:")
    best: dict[str, float | None] = {}
    for mix in mixes:
        ok = [r["rate"] for r in rows if r["mix"] == mix and r["p99_ms"] <= TARGET_P99_MS
              and not r["errors"] and not r["busy"]]
        best[mix] = max(ok) if ok else None
        print(f"  {mix:13s} {best[mix] if best[mix] else 'none of the rates tried'}"
              + ("/s" if best[mix] else ""))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"nodes": args.nodes, "first_validation_ms": round(warm * 1e3, 1),
             "cpu_ms_per_review": {k: round(v * 1e3, 3) for k, v in ready["cpu"].items()},
             "rows": rows, "highest_rate_p99_le_20ms": best}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
