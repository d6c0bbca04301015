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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission import context
from admission.kube import client, errors, kinds

log = structlog.get_logger("fitgate.certs")

Clock = Callable[[], datetime.datetime]

CA_VALIDITY = datetime.timedelta(days=3650)
# Certificates start a little in the past so a node whose clock runs behind accepts them.
BACKDATE = datetime.timedelta(minutes=5)
# Concurrent writers (replicas) resolve in a few rounds; more means something is wrong.
MAX_ATTEMPTS = 5


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass(frozen=True)
class CertConfig:
    """Where the certificate lives and what it must name (from the chart's config)."""

    namespace: str
    secret_name: str
    service_name: str
    mutating_webhook: str
    validating_webhook: str
    validity: datetime.timedelta = datetime.timedelta(days=365)
    renew_before: datetime.timedelta = datetime.timedelta(days=30)
    cert_dir: str | None = None  # where this replica's webhook server reads tls.crt/tls.key

    @property
    def dns_names(self) -> tuple[str, ...]:
        svc = f"{self.service_name}.{self.namespace}.svc"
        return (svc, f"{svc}.cluster.local")


@dataclasses.dataclass(frozen=True)
class Bundle:
    """PEM texts of what the Secret holds. `ca_cert` may hold several CAs (rotation)."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def to_secret_data(self) -> dict[str, str]:
        raw = {"ca.crt": self.ca_cert, "ca.key": self.ca_key, "tls.crt": self.cert,
               "tls.key": self.key}
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_secret(cls, secret: client.Obj) -> Bundle | None:
        data = secret.get("data") or {}
        try:
            return cls(*(base64.b64decode(data[k], validate=True)
                         for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")))
        except (KeyError, TypeError, ValueError):
            return None


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
             ) -> CertConfig | None:
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
    return CertConfig(namespace=namespace, secret_name=env[ENV["secret_name"]],
                      service_name=env[ENV["service_name"]],
                      mutating_webhook=env[ENV["mutating_webhook"]],
                      validating_webhook=env[ENV["validating_webhook"]],
                      validity=days["validity"], renew_before=days["renew_before"],
                      cert_dir=cert_dir)


def write_files(bundle: Bundle, cert_dir: str) -> bool:
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


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def issue_ca(now: datetime.datetime, validity: datetime.timedelta = CA_VALIDITY
             ) -> tuple[bytes, bytes]:
    """A new self-signed CA: (certificate PEM, key PEM)."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                         f"fitgate-webhook-ca-{int(now.timestamp())}")])
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def issue_serving(ca_cert_pem: bytes, ca_key_pem: bytes, dns_names: Sequence[str],
                  now: datetime.datetime, validity: datetime.timedelta
                  ) -> tuple[bytes, bytes]:
    """A serving certificate for `dns_names` signed by the (first) CA in `ca_cert_pem`."""
    ca_cert = x509.load_pem_x509_certificates(ca_cert_pem)[0]
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key")
    key = _key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


# ---------------------------------------------------------------------- checking


def _ca_problem(bundle: Bundle, now: datetime.datetime, renew_before: datetime.timedelta
                ) -> str | None:
    try:
        ca = x509.load_pem_x509_certificates(bundle.ca_cert)[0]
        ca_key = serialization.load_pem_private_key(bundle.ca_key, password=None)
    except ValueError as exc:
        return f"the CA in the Secret cannot be read: {exc}"
    if ca.public_key() != ca_key.public_key():
        return "ca.key does not belong to the first certificate of ca.crt"
    if ca.not_valid_after_utc - renew_before <= now:
        return f"the CA expires at {ca.not_valid_after_utc.isoformat()}"
    return None


def _serving_problem(bundle: Bundle, dns_names: Sequence[str], now: datetime.datetime,
                     renew_before: datetime.timedelta) -> str | None:
    try:
        ca = x509.load_pem_x509_certificates(bundle.ca_cert)[0]
        cert = x509.load_pem_x509_certificate(bundle.cert)
        key = serialization.load_pem_private_key(bundle.key, password=None)
    except ValueError as exc:
        return f"the serving certificate in the Secret cannot be read: {exc}"
    if cert.public_key() != key.public_key():
        return "tls.key does not belong to tls.crt"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the serving certificate is not signed by the current CA"
    try:
        names = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if sorted(names) != sorted(dns_names):
        return f"the serving certificate names {sorted(names)}, not {sorted(dns_names)}"
    if cert.not_valid_after_utc - renew_before <= now:
        return f"the serving certificate expires at {cert.not_valid_after_utc.isoformat()}"
    return None


def _valid_cas(pem: bytes, now: datetime.datetime) -> list[x509.Certificate]:
    try:
        return [c for c in x509.load_pem_x509_certificates(pem) if c.not_valid_after_utc > now]
    except ValueError:
        return []


def renew(old: Bundle | None, config: CertConfig, now: datetime.datetime
          ) -> tuple[Bundle | None, tuple[str, ...]]:
    """The bundle the Secret should hold and why, or (None, ()) when `old` is fine."""
    if old is None:
        reasons: tuple[str, ...] = ("the Secret holds no certificate",)
        ca_cert, ca_key = issue_ca(now)
        cas = ca_cert
    else:
        ca_why = _ca_problem(old, now, config.renew_before)
        if ca_why is None:
            why = _serving_problem(old, config.dns_names, now, config.renew_before)
            if why is None:
                return None, ()
            reasons = (why,)
            ca_cert, ca_key, cas = old.ca_cert, old.ca_key, old.ca_cert
        else:
            reasons = (ca_why,)
            ca_cert, ca_key = issue_ca(now)
            # Keep the CAs that are still valid, so the old serving certificate is trusted
            # until every replica has loaded the new one.
            kept = b"".join(c.public_bytes(serialization.Encoding.PEM)
                            for c in _valid_cas(old.ca_cert, now))
            cas = ca_cert + kept
    cert, key = issue_serving(ca_cert, ca_key, config.dns_names, now, config.validity)
    return Bundle(cas, ca_key, cert, key), reasons


# ---------------------------------------------------------------------- the API


async def _sync_secret(api: client.Client, config: CertConfig, now: datetime.datetime
                       ) -> tuple[Bundle, str, tuple[str, ...]]:
    for _ in range(MAX_ATTEMPTS):
        try:
            secret = await api.get(kinds.SECRET, config.secret_name, config.namespace)
        except errors.NotFound:
            bundle, reasons = renew(None, config, now)
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
        old = Bundle.from_secret(secret)
        new, reasons = renew(old, config, now)
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


async def ensure(api: client.Client, config: CertConfig, clock: Clock = utcnow) -> Outcome:
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


async def run(api: client.Client, config: CertConfig, *, interval_s: float = 3600.0,
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

    def __init__(self, api: client.Client, config: CertConfig, *, clock: Clock = utcnow,
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
