"""Issuing and renewing the self-managed CA and serving certificate: pure functions of
the current Bundle, the settings and the time (no API calls; `keeper` stores the result).

`renew` re-issues the serving certificate when it is missing, unreadable, not signed by
the CA, does not name the Service, or expires within `renew_before`; the CA when it is
missing, unreadable or expires within `renew_before`, keeping the old CA in `ca.crt` until
it expires.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission.kube import client

CA_VALIDITY = datetime.timedelta(days=3650)
# Certificates start a little in the past so a node whose clock runs behind accepts them.
BACKDATE = datetime.timedelta(minutes=5)


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
