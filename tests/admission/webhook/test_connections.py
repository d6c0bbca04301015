"""Slow and idle clients on the webhook (issue #20 item 7), over TLS on loopback: many
half-sent requests are held or closed, never all the descriptors, and reviews are still
answered; a trickled body gets 408."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import ssl
from collections.abc import AsyncIterator

from admission.engine import fitting
from admission.webhook import connections, review, server
from tests.admission import builders as ab

HALF_SENT = b"POST /mutate-jobs HTTP/1.1\r\nHost: fitgate\r\nContent-Type: application/json\r\n"


class Served:
    def __init__(self, port: int, client: ssl.SSLContext) -> None:
        self.port = port
        self.client = client

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.client)

    async def review(self) -> int | None:
        """POST one small review on a new connection: the HTTP status, None when the
        connection is closed before an answer."""
        body = json.dumps(ab.review(ab.job())).encode()
        try:
            reader, writer = await self.open()
        except (ConnectionError, ssl.SSLError):
            return None
        try:
            writer.write(b"POST /mutate-jobs HTTP/1.1\r\nHost: fitgate\r\nConnection: close\r\n"
                         b"Content-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            head = await reader.readline()
        except (ConnectionError, ssl.SSLError):
            return None
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
        return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None


@contextlib.asynccontextmanager
async def serve(tmp: pathlib.Path, limits: connections.Limits) -> AsyncIterator[Served]:
    stores = ab.stores([*ab.queued("topo-fit"), *ab.cluster(1)])
    hooks = review.Hooks(stores, fitting.StoreEngine(stores))
    cert, key, pem = ab.tls_pair(tmp)
    app = server.init(hooks, server.Settings(limits=limits))
    client = ssl.create_default_context(cadata=pem.decode())
    async with server.serving(app, "127.0.0.1", 0,
                              server.Certificates(str(cert), str(key))) as addresses:
        yield Served(addresses[0][1], client)


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (EOF or reset) before sending anything.
    Waits at most 30 s (a liveness bound: the test's deadlines are far shorter)."""
    try:
        data = await asyncio.wait_for(reader.read(1), 30)
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return data == b""


async def half_sent(served: Served, n: int) -> list[tuple[asyncio.StreamReader,
                                                           asyncio.StreamWriter]]:
    out = []
    for _ in range(n):
        reader, writer = await served.open()
        writer.write(HALF_SENT)
        await writer.drain()
        out.append((reader, writer))
    return out


async def close_all(conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    for _, writer in conns:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def test_reviews_are_answered_while_slow_clients_hold_connections(
        tmp_path: pathlib.Path) -> None:
    limits = connections.Limits(max_connections=64, header_timeout=60, body_timeout=60)
    async with serve(tmp_path, limits) as served:
        held = await half_sent(served, 40)
        assert [await served.review() for _ in range(3)] == [200, 200, 200]
        await close_all(held)


async def test_connections_over_the_cap_are_closed_at_once(tmp_path: pathlib.Path) -> None:
    # Long deadlines: only the cap can close these connections.
    limits = connections.Limits(max_connections=8, header_timeout=120, body_timeout=120)
    async with serve(tmp_path, limits) as served:
        held = await half_sent(served, 8)
        extra = await half_sent(served, 5)
        assert [await closed_by_server(r) for r, _ in extra] == [True] * 5
        assert await served.review() is None  # the cap is full of slow clients
        await close_all(held)
        await close_all(extra)
        answered = None
        for _ in range(100):  # the server sees the closes on its next loop turns
            answered = await served.review()
            if answered is not None:
                break
            await asyncio.sleep(0.02)
        assert answered == 200


async def test_half_sent_headers_are_closed_and_reviews_get_through(
        tmp_path: pathlib.Path) -> None:
    limits = connections.Limits(max_connections=16, header_timeout=0.5, body_timeout=60)
    async with serve(tmp_path, limits) as served:
        held = await half_sent(served, 16)  # every connection the cap allows
        # Each is closed by the header deadline, though the client keeps it open.
        assert [await closed_by_server(r) for r, _ in held] == [True] * 16
        answered = None
        for _ in range(100):
            answered = await served.review()
            if answered is not None:
                break
            await asyncio.sleep(0.02)
        assert answered == 200
        await close_all(held)


async def test_an_idle_connection_without_a_handshake_is_closed(tmp_path: pathlib.Path) -> None:
    limits = connections.Limits(max_connections=4, header_timeout=0.5, body_timeout=60)
    async with serve(tmp_path, limits) as served:
        # Plain TCP: no TLS handshake ever starts.
        raw = [await asyncio.open_connection("127.0.0.1", served.port) for _ in range(4)]
        assert [await closed_by_server(r) for r, _ in raw] == [True] * 4
        await close_all(raw)
        answered = None
        for _ in range(200):  # the cap counts a handshake until its deadline has passed
            answered = await served.review()
            if answered is not None:
                break
            await asyncio.sleep(0.05)
        assert answered == 200


async def test_a_trickled_body_gets_408(tmp_path: pathlib.Path) -> None:
    limits = connections.Limits(max_connections=8, header_timeout=60, body_timeout=0.3)
    async with serve(tmp_path, limits) as served:
        reader, writer = await served.open()
        writer.write(b"POST /mutate-jobs HTTP/1.1\r\nHost: fitgate\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\":")
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), 30)
        assert head.split()[1] == b"408"
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
