"""The webhook's serving certificate when fitgate manages it itself.

With the chart value `certificates.mode: self-managed` no cert-manager is needed: fitgate
keeps a CA and a serving certificate signed by it in one Secret of its own namespace
(`kubernetes.io/tls`: `tls.crt`, `tls.key`, plus `ca.crt` and `ca.key`), and writes the CA
into the `caBundle` of its two webhook configurations. The Deployment mounts the Secret;
the kubelet refreshes the files after a rotation and the webhook server reloads them.

Every replica also writes the pair into its `cert_dir` (an emptyDir in the chart), so the
webhook server has its files as soon as the Secret exists instead of waiting for the
kubelet to project a Secret created after the pod started.

`ensure` is one pass of that, safe to run on every replica at once: a create that loses
the race reads the winner's Secret (AlreadyExists), an update names the resourceVersion
it read (Conflict: read again). It re-issues

- the serving certificate when it is missing, unreadable, not signed by the CA, does not
  name the Service, or expires within `renew_before`;
- the CA when it is missing, unreadable or expires within `renew_before`. The old CA stays
  in `ca.crt` (and so in the caBundle) until it expires, so a replica that still serves the
  old certificate is trusted while the kubelet catches up.

The RBAC this needs is `rbac.SELF_MANAGED_CERTS`, each object by name. The chart passes
the names as `FITGATE_CERT_*` environment variables (`from_env`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import os
import pathlib
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from admission import context
from admission.certs import issue
from admission.kube import client, errors, kinds

log = structlog.get_logger("fitgate.certs")

Clock = Callable[[], datetime.datetime]

# Concurrent writers (replicas) resolve in a few rounds; more means something is wrong.
MAX_ATTEMPTS = 5


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one `ensure` pass did, for the log and the tests."""

    secret: str  # "created", "rotated" or "unchanged"
    reasons: tuple[str, ...]  # why the certificate was issued or re-issued
    ca_bundle_patched: tuple[str, ...]  # "<kind>/<name>" of the patched configurations
    missing: tuple[str, ...]  # webhook configurations that do not exist (yet)
    files_written: bool = False  # this replica's cert_dir got a new pair


class CertConfigError(Exception):
    """The self-managed certificate settings are incomplete or malformed."""


#: The environment variables the chart sets in self-managed mode.
ENV = {"secret_name": "FITGATE_CERT_SECRET", "service_name": "FITGATE_WEBHOOK_SERVICE",
       "mutating_webhook": "FITGATE_MUTATING_WEBHOOK_CONFIGURATION",
       "validating_webhook": "FITGATE_VALIDATING_WEBHOOK_CONFIGURATION"}


def from_env(env: Mapping[str, str], namespace: str, cert_dir: str | None
             ) -> issue.CertConfig | None:
    """The settings the chart passes when `FITGATE_CERT_MODE=self-managed`; None when
    fitgate does not manage its certificate (cert-manager, or a local process)."""
    mode = env.get("FITGATE_CERT_MODE", "")
    if mode in ("", "cert-manager", "external"):
        return None
    if mode != "self-managed":
        raise CertConfigError(f"FITGATE_CERT_MODE={mode!r}: expected self-managed, "
                              "cert-manager or external")
    missing = [var for var in ENV.values() if not env.get(var)]
    if missing:
        raise CertConfigError("FITGATE_CERT_MODE=self-managed needs " + ", ".join(missing))
    days: dict[str, datetime.timedelta] = {}
    for field, var, default in (("validity", "FITGATE_CERT_VALIDITY_DAYS", 365),
                                ("renew_before", "FITGATE_CERT_RENEW_BEFORE_DAYS", 30)):
        raw = env.get(var, str(default))
        try:
            days[field] = datetime.timedelta(days=int(raw))
        except ValueError:
            raise CertConfigError(f"{var}={raw!r}: expected a whole number of days") from None
        if days[field].days < 1:
            raise CertConfigError(f"{var}={raw!r}: must be at least 1")
    if days["renew_before"] >= days["validity"]:
        raise CertConfigError("FITGATE_CERT_RENEW_BEFORE_DAYS must be less than "
                              "FITGATE_CERT_VALIDITY_DAYS")
    return issue.CertConfig(namespace=namespace, secret_name=env[ENV["secret_name"]],
                      service_name=env[ENV["service_name"]],
                      mutating_webhook=env[ENV["mutating_webhook"]],
                      validating_webhook=env[ENV["validating_webhook"]],
                      validity=days["validity"], renew_before=days["renew_before"],
                      cert_dir=cert_dir)


def write_files(bundle: issue.Bundle, cert_dir: str) -> bool:
    """Write tls.crt and tls.key (and ca.crt) into `cert_dir` when they differ; each file
    is replaced atomically (a reader sees the old or the new file, never half of one).
    The key goes first: the webhook server reloads when either file changes, and a
    certificate is never paired with a key it does not belong to for longer than the
    gap between the two renames. True when something changed."""
    directory = pathlib.Path(cert_dir)
    changed = False
    for name, data in (("tls.key", bundle.key), ("tls.crt", bundle.cert),
                       ("ca.crt", bundle.ca_cert)):
        path = directory / name
        try:
            if path.read_bytes() == data:
                continue
        except FileNotFoundError:
            pass
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o600 if name == "tls.key" else 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        changed = True
    return changed


# ---------------------------------------------------------------------- issuing


async def _sync_secret(api: client.Client, config: issue.CertConfig, now: datetime.datetime
                       ) -> tuple[issue.Bundle, str, tuple[str, ...]]:
    for _ in range(MAX_ATTEMPTS):
        try:
            secret = await api.get(kinds.SECRET, config.secret_name, config.namespace)
        except errors.NotFound:
            bundle, reasons = issue.renew(None, config, now)
            assert bundle is not None
            body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": config.secret_name, "namespace": config.namespace,
                                 "labels": {"app.kubernetes.io/part-of": "fitgate"}},
                    "data": bundle.to_secret_data()}
            try:
                await api.create(kinds.SECRET, body)
            except errors.AlreadyExists:
                continue  # another replica created it first: use theirs
            return bundle, "created", reasons
        old = issue.Bundle.from_secret(secret)
        new, reasons = issue.renew(old, config, now)
        if new is None:
            assert old is not None
            return old, "unchanged", ()
        patch = {"metadata": {"resourceVersion": secret["metadata"]["resourceVersion"]},
                 "data": new.to_secret_data()}
        try:
            await api.patch(kinds.SECRET, config.secret_name, patch,
                            namespace=config.namespace)
        except errors.Conflict:
            continue  # changed since we read it (another replica rotated): look again
        return new, "rotated", reasons
    raise RuntimeError(f"Secret {config.namespace}/{config.secret_name}: still changing "
                       f"under us after {MAX_ATTEMPTS} attempts")


def ca_bundle_patch(configuration: client.Obj, ca_bundle: str) -> list[dict[str, Any]]:
    """JSON patch setting every webhook's caBundle; each op is guarded by a test of the
    webhook's name, so a configuration edited in between fails instead of being
    misapplied. Empty when every caBundle is already right."""
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(configuration.get("webhooks") or []):
        cc = hook.get("clientConfig") or {}
        if cc.get("caBundle") == ca_bundle:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
        ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                    "value": ca_bundle})
    return ops


async def _sync_ca_bundle(api: client.Client, kind: kinds.Kind, name: str, ca_bundle: str
                          ) -> bool | None:
    """True when patched, False when already right, None when the configuration is
    missing."""
    for _ in range(MAX_ATTEMPTS):
        try:
            configuration = await api.get(kind, name)
        except errors.NotFound:
            return None
        ops = ca_bundle_patch(configuration, ca_bundle)
        if not ops:
            return False
        try:
            await api.patch(kind, name, ops, patch_type="json")
        except errors.ApiError as exc:
            if exc.status in (409, 422):  # edited in between: the name test failed
                continue
            raise
        return True
    raise RuntimeError(f"{kind.kind} {name}: still changing under us after "
                       f"{MAX_ATTEMPTS} attempts")


async def ensure(api: client.Client, config: issue.CertConfig, clock: Clock = utcnow) -> Outcome:
    """One pass: the Secret holds a good certificate, this replica's `cert_dir` holds it,
    and both webhook configurations trust its CA. Raises the client's errors on an API
    outage (the caller retries). Run it once before the webhook server starts."""
    now = clock()
    bundle, secret_state, reasons = await _sync_secret(api, config, now)
    written = write_files(bundle, config.cert_dir) if config.cert_dir else False
    ca_bundle = base64.b64encode(bundle.ca_cert).decode()
    patched: list[str] = []
    missing: list[str] = []
    for kind, name in ((kinds.MUTATING_WEBHOOK_CONFIGURATION, config.mutating_webhook),
                       (kinds.VALIDATING_WEBHOOK_CONFIGURATION, config.validating_webhook)):
        done = await _sync_ca_bundle(api, kind, name, ca_bundle)
        if done is None:
            missing.append(f"{kind.kind}/{name}")
        elif done:
            patched.append(f"{kind.kind}/{name}")
    return Outcome(secret_state, reasons, tuple(patched), tuple(missing), written)


async def run(api: client.Client, config: issue.CertConfig, *, interval_s: float = 3600.0,
              retry_s: float = 10.0, clock: Clock = utcnow,
              on_outcome: Callable[[Outcome], None] | None = None,
              on_error: Callable[[Exception], None] | None = None) -> None:
    """`ensure` now and every `interval_s` (every `retry_s` after an error or while a
    webhook configuration is missing), until cancelled."""
    while True:
        try:
            outcome = await ensure(api, config, clock)
        except (errors.ApiError, RuntimeError, OSError) as exc:
            if on_error is not None:
                on_error(exc)
            await asyncio.sleep(retry_s)
            continue
        if on_outcome is not None:
            on_outcome(outcome)
        await asyncio.sleep(retry_s if outcome.missing else interval_s)


# ---------------------------------------------------------------------- in fitgate serve


class CertificateKeeper:
    """A `context.Server` on every replica: `start` returns once this replica's `cert_dir`
    holds a good pair (the first `ensure`, retried while the API fails), so a webhook
    server started after it finds its files; then `run` keeps them current until `stop`."""

    def __init__(self, api: client.Client, config: issue.CertConfig, *, clock: Clock = utcnow,
                 retry_s: float = 5.0, interval_s: float = 3600.0) -> None:
        self.api = api
        self.config = config
        self.clock = clock
        self.retry_s = retry_s
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        while True:
            try:
                outcome = await ensure(self.api, self.config, self.clock)
                break
            except (errors.ApiError, RuntimeError, OSError) as exc:
                log.warning("certs.not_yet", secret=self.config.secret_name,
                            error=str(exc), retry_s=self.retry_s)
                await asyncio.sleep(self.retry_s)
        _log_outcome(outcome)
        self._task = asyncio.create_task(
            run(self.api, self.config, interval_s=self.interval_s, retry_s=self.retry_s,
                clock=self.clock, on_outcome=_log_outcome,
                on_error=lambda exc: log.warning("certs.failed", error=str(exc))),
            name="certs")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def _log_outcome(outcome: Outcome) -> None:
    if outcome.secret != "unchanged" or outcome.ca_bundle_patched or outcome.files_written:
        log.info("certs.synced", secret=outcome.secret, reasons=list(outcome.reasons),
                 ca_bundle_patched=list(outcome.ca_bundle_patched),
                 files_written=outcome.files_written)
    if outcome.missing:
        log.warning("certs.webhook_configuration_missing", missing=list(outcome.missing))


def component(ctx: context.Context, env: Mapping[str, str] | None = None) -> context.Component:
    """The `fitgate serve` component (in `admission/app/components.py`, before the webhook's):
    a CertificateKeeper when the chart says `FITGATE_CERT_MODE=self-managed`, nothing
    otherwise."""
    settings = from_env(os.environ if env is None else env, ctx.config.namespace,
                        ctx.config.cert_dir)
    if settings is None:
        return context.Component()
    if not settings.cert_dir:
        raise CertConfigError("FITGATE_CERT_MODE=self-managed needs cert_dir (where the "
                              "webhook server reads tls.crt and tls.key)")
    return context.Component(servers=[CertificateKeeper(ctx.api, settings, clock=utcnow)])
