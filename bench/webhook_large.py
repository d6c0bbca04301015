"""The pod hook's latency while clients post large Jobs (issue #20 item 8).

    .venv/bin/python -m bench.webhook_large [--clients 16] [--rounds 3] [--inline]
                                            [--containers 4000]

The webhook server (`admission.webhook.server` over `review.Hooks`, as `fitgate serve`
runs them, with its switch interval) runs in a child process over a small cluster.
`--clients` clients each post `--rounds` validate-jobs reviews of a Job of about 1.8 MiB
(`--containers` containers, each with a few environment variables) while one client
sends pod-hook reviews one after another until they are done. Printed: the size of a
large review, the pod hook's p50/p99/max latency and how many it answered, and the
large reviews' p50/max. `--inline` reads every request on the event loop (fitgate before
`admission/webhook/offload.py`), to compare. Figures, not assertions: the machine is
shared.
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


def large_job(containers: int) -> dict[str, Any]:
    from tests.admission import builders as ab

    job = ab.job("large")
    spec = job["spec"]["template"]["spec"]
    base = spec["containers"][0]
    spec["containers"] = [
        {**base, "name": f"c{i}",
         "env": [{"name": f"VAR_{k}", "value": "v" * 80} for k in range(4)]}
        for i in range(containers)]
    return job


def serve(cert: str, key: str, inline: bool, conn: multiprocessing.connection.Connection
          ) -> None:
    import structlog

    from admission import config
    from admission.engine import fitting
    from admission.webhook import connections, offload, review, server
    from tests.admission import builders as ab

    sys.setswitchinterval(config.Config().switch_interval)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    stores = ab.stores([*ab.queued("topo-fit"), *ab.cluster(2)])
    reader = offload.Offload(threshold=1 << 62) if inline else offload.Offload()
    hooks = review.Hooks(stores, fitting.StoreEngine(stores, idle=True), reader=reader,
                         config=review.Config(budget_seconds=60))
    # Deadlines far past the run: the reads on the loop would trip the default ones.
    limits = connections.Limits(header_timeout=300, body_timeout=300)
    app = server.init(hooks, server.Settings(limits=limits))

    async def main() -> None:
        async with server.serving(app, "127.0.0.1", 0,
                                  server.Certificates(cert, key)) as addresses:
            conn.send(addresses[0][1])
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)

    asyncio.run(main())


async def measure(port: int, pem: bytes, args: argparse.Namespace) -> None:
    import aiohttp

    from tests.admission import builders as ab

    url = f"https://127.0.0.1:{port}"
    tls = ssl.create_default_context(cadata=pem.decode())
    big = json.dumps(ab.review(large_job(args.containers))).encode()
    pod = json.dumps(ab.review({"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "p", "namespace": ab.NS}, "spec": {}},
                               group="", kind="Pod", resource="pods")).encode()
    headers = {"Content-Type": "application/json"}
    large: list[float] = []
    small: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=0),
                                     timeout=aiohttp.ClientTimeout(total=600)) as s:
        async def post(hook: str, body: bytes) -> float:
            t = time.perf_counter()
            async with s.post(f"{url}/{hook}", data=body, headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status
            return time.perf_counter() - t

        await post("mutate-pods", pod)  # warm connection and TLS

        async def client() -> None:
            for _ in range(args.rounds):
                large.append(await post("validate-jobs", big))

        clients = [asyncio.create_task(client()) for _ in range(args.clients)]
        while not all(c.done() for c in clients):
            small.append(await post("mutate-pods", pod))
        await asyncio.gather(*clients)

    def ms(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1e3

    print(f"large review: {len(big) / 2**20:.2f} MiB, {args.containers} containers; "
          f"{args.clients} clients x {args.rounds}; reads "
          f"{'on the event loop' if args.inline else 'off the loop (offload.py)'}")
    print(f"pod hook: {len(small)} answered, p50 {statistics.median(small) * 1e3:.1f} ms, "
          f"p99 {ms(small, 0.99):.1f} ms, max {max(small) * 1e3:.1f} ms")
    print(f"large reviews: p50 {statistics.median(large) * 1e3:.0f} ms, "
          f"max {max(large) * 1e3:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--containers", type=int, default=4000)
    parser.add_argument("--inline", action="store_true")
    args = parser.parse_args()
    from tests.admission import builders as ab

    with tempfile.TemporaryDirectory() as tmp:
        cert, key, pem = ab.tls_pair(pathlib.Path(tmp))
        parent, child = multiprocessing.Pipe()
        proc = multiprocessing.get_context("spawn").Process(
            target=serve, args=(str(cert), str(key), args.inline, child))
        proc.start()
        try:
            port = parent.recv()
            asyncio.run(measure(port, pem, args))
        finally:
            parent.send("stop")
            proc.join(30)


if __name__ == "__main__":
    main()
