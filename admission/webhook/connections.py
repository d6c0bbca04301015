"""Connections to the webhook, bounded: how many, and how long each may take to say what it
wants.

A client that opens a connection and sends nothing, or half a request, costs the process
a file descriptor for as long as the connection stays open. Without limits a few
thousand such connections exhaust the descriptor limit and the API server's reviews
are refused (measured in issue #20: 1,011 half-sent requests used up a 1,024-descriptor
limit). Three bounds, all in `Limits`:

- `max_connections`: connections open at once, counted from the moment they are
  accepted (before the TLS handshake). One over the cap is closed as soon as it is
  accepted (`Guard`), so the process never holds more than the cap plus the
  connections still in a handshake that is about to be closed.
- `header_timeout`: seconds from accepting a connection (and from the end of each
  response on a kept-alive one) to a complete set of request headers; the TLS
  handshake must finish within the same time. aiohttp's keep-alive timer is started
  when the connection opens and is not reset by partial data, so it is exactly this
  bound; `serving` sets it.
- `body_timeout`: seconds to read a request's body once its headers are in (the
  handler's `asyncio.timeout`; answered 408).

The API server keeps a few connections alive and sends each review whole, so none of
these bounds touches it; they only close connections that are idle or trickling.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

log = structlog.get_logger("fitgate.webhook")


@dataclasses.dataclass(frozen=True)
class Limits:
    #: Connections open at once (accepted, in a TLS handshake or serving requests).
    max_connections: int = 256
    #: Seconds to complete the TLS handshake and a request's headers.
    header_timeout: float = 10.0
    #: Seconds to read a request's body once its headers are in.
    body_timeout: float = 10.0


class _Refused(asyncio.Protocol):
    """A connection over the cap: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.abort()


class _Counted(asyncio.Protocol):
    """The aiohttp request handler of one connection, counted by its `Guard` from accept
    to close."""

    def __init__(self, guard: Guard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._made = False
        self._expiry: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made = True
        if self._expiry is not None:
            self._expiry.cancel()
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.release(self)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def expire_handshake(self) -> None:
        """The handshake deadline passed without the connection being made: asyncio has
        closed it (and never calls `connection_lost` for it)."""
        if not self._made:
            self._guard.release(self)


class Guard:
    """A protocol factory over aiohttp's: counts open connections and refuses the ones over
    `limit`. A connection still in its TLS handshake counts until the handshake completes
    or its deadline (`handshake_timeout`, which the site passes to asyncio) has passed."""

    def __init__(self, factory: Callable[[], Any], limit: int,
                 handshake_timeout: float) -> None:
        self._factory = factory
        self.limit = limit
        self._handshake_timeout = handshake_timeout
        self._open: set[_Counted] = set()
        self.refused = 0

    @property
    def open(self) -> int:
        return len(self._open)

    def __call__(self) -> asyncio.Protocol:
        if len(self._open) >= self.limit:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("webhook connection refused: too many open",
                            limit=self.limit, refused=self.refused)
            return _Refused()
        counted = _Counted(self, self._factory())
        self._open.add(counted)
        # A little past asyncio's own handshake deadline, so it has closed the socket.
        counted._expiry = asyncio.get_running_loop().call_later(
            self._handshake_timeout + 1.0, counted.expire_handshake)
        return counted

    def release(self, counted: _Counted) -> None:
        self._open.discard(counted)


class GuardedSite(web.TCPSite):
    """`web.TCPSite` whose connections go through a `Guard`, with a TLS handshake
    deadline."""

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, *,
                 limits: Limits, ssl_context: Any = None) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self.limits = limits
        self.guard: Guard | None = None

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self.guard = Guard(server, self.limits.max_connections, self.limits.header_timeout)
        self._server = await asyncio.get_running_loop().create_server(
            self.guard, self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl_handshake_timeout=self.limits.header_timeout if self._ssl_context else None)
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]
