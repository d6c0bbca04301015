"""The webhook's HTTPS server (aiohttp): parse, delegate to `review.Hooks`, answer JSON.

- `init(hooks, settings)` builds the application: `POST /mutate-jobs`, `/validate-jobs`,
  `/mutate-pods`; `GET /healthz` (the process answers) and `/readyz` (the caches the
  decisions read are filled).
- Connections are bounded (`connections.py`): at most `max_connections` open, headers
  (and the TLS handshake) within `header_timeout`, the body within `body_timeout` (408).
- Bodies larger than `settings.max_body_bytes` are refused with 413 before they are read
  whole; a body that is not an AdmissionReview v1 gets 400 with the reason. The hooks never
  raise for a request's content, so a well-formed request never gets a 5xx.
- TLS: `Certificates` loads the certificate and key files into one SSL context and reloads
  them in place when their modification time changes (a mounted Secret is updated by
  swapping files), so new connections get the new certificate without a restart; a
  half-written pair is retried on the next check and the old one stays in use.
- `serving(...)` starts the site and stops it (an async context manager), for
  `fitgate serve` and the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pydantic
import structlog
from aiohttp import web

from admission.runtime import metrics
from admission.webhook import connections, models, review

log = structlog.get_logger("fitgate.webhook")

_MAX_REASONS = 5


@dataclasses.dataclass(frozen=True)
class Settings:
    #: The API server sends objects of at most 3 MiB; a review may carry object and
    #: oldObject.
    max_body_bytes: int = 7 * 1024 * 1024
    cert_file: str | None = None
    key_file: str | None = None
    #: Seconds between checks of the certificate files' modification time.
    reload_interval: float = 5.0
    #: Connections open at once, TLS handshake and headers deadline, body deadline.
    limits: connections.Limits = dataclasses.field(default_factory=connections.Limits)


HOOKS = web.AppKey("hooks", review.Hooks)
SETTINGS = web.AppKey("settings", Settings)


class Certificates:
    """One server SSL context over a certificate and key file pair, reloaded in place when
    either file changes."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp = self._mtimes()
        self.context.load_cert_chain(cert_file, key_file)
        metrics.serving_certificate(cert_file)
        self.reloads = 0

    def _mtimes(self) -> tuple[int, int]:
        return (os.stat(self.cert_file).st_mtime_ns, os.stat(self.key_file).st_mtime_ns)

    def reload_if_changed(self) -> bool:
        """Load the files again when they changed; True when the context now serves them."""
        try:
            stamp = self._mtimes()
        except OSError as exc:
            log.warning("certificate files unreadable; keeping the loaded pair",
                        error=str(exc))
            return False
        if stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:  # mid-rotation: try again next time
            log.warning("certificate reload failed; keeping the loaded pair", error=str(exc))
            return False
        self._stamp = stamp
        self.reloads += 1
        metrics.serving_certificate(self.cert_file)
        log.info("certificate reloaded", cert=self.cert_file, reloads=self.reloads)
        return True

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()


def _status(reason: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "BadRequest",
            "code": 400, "message": reason}


def _validation_reason(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:_MAX_REASONS]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - _MAX_REASONS
    return ("not an AdmissionReview v1: " + "; ".join(parts)
            + (f"; and {more} more" if more > 0 else ""))


def parse(raw: bytes) -> models.AdmissionReview | tuple[int, dict[str, Any]]:
    """The AdmissionReview of a request body, or (400, the reason)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return 400, _status(f"body is not JSON: {str(exc)[:200]}")
    try:
        return models.AdmissionReview.model_validate(data)
    except pydantic.ValidationError as exc:
        return 400, _status(_validation_reason(exc))
    except RecursionError:
        return 400, _status("body is nested too deeply")


async def answer(hooks: review.Hooks, hook: review.Hook, raw: bytes
                 ) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) for one request body: 400 with the reason for anything that
    is not an AdmissionReview v1, else 200 with the hooks' response. What the handler does
    between reading the body and writing the answer, without the framework. A large body
    is parsed off the loop (`offload.py`)."""
    parsed = await hooks.offload.run(len(raw), parse, raw)
    if isinstance(parsed, tuple):
        return parsed
    response = await hooks.review(hook, parsed.request, size=len(raw))
    return 200, response.review()


def _handler(hook: review.Hook) -> Any:
    async def handle(request: web.Request) -> web.Response:
        limit = request.app[SETTINGS].max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit,
                                                actual_size=request.content_length)
        try:
            async with asyncio.timeout(request.app[SETTINGS].limits.body_timeout):
                raw = await request.read()  # aiohttp refuses more than client_max_size: 413
        except TimeoutError:
            raise web.HTTPRequestTimeout(text="the request body was not sent in time") \
                from None
        status, body = await answer(request.app[HOOKS], hook, raw)
        return web.json_response(body, status=status)
    return handle


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    if request.app[HOOKS].ready():
        return web.Response(text="ok")
    return web.Response(status=503, text="caches not filled yet")


async def _close_hooks(app: web.Application) -> AsyncIterator[None]:
    yield
    app[HOOKS].close()


def init(hooks: review.Hooks, settings: Settings | None = None) -> web.Application:
    """The webhook application (without TLS: `serving` adds it)."""
    settings = settings or Settings()
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[HOOKS] = hooks
    app[SETTINGS] = settings
    app.router.add_routes([web.post(f"/{hook}", _handler(hook)) for hook in review.HOOKS])
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.cleanup_ctx.append(_close_hooks)
    return app


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str = "0.0.0.0", port: int = 9443,
                  certificates: Certificates | None = None
                  ) -> AsyncIterator[Sequence[Any]]:
    """Serve `app` (over TLS when `certificates`), watching the certificate files; yields
    the bound addresses."""
    settings = app[SETTINGS]
    if certificates is None and settings.cert_file and settings.key_file:
        certificates = Certificates(settings.cert_file, settings.key_file)
    # aiohttp's keep-alive timer runs from the connection's start and is not reset by
    # partial data: the deadline for a request's headers.
    runner = web.AppRunner(app, access_log=None,
                           keepalive_timeout=settings.limits.header_timeout)
    await runner.setup()
    watcher = None
    try:
        site = connections.GuardedSite(
            runner, host, port, limits=settings.limits,
            ssl_context=certificates.context if certificates else None)
        await site.start()
        if certificates is not None:
            watcher = asyncio.create_task(certificates.watch(settings.reload_interval))
        yield runner.addresses
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await runner.cleanup()
