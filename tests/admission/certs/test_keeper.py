"""Self-managed serving certificate: created once, trusted by both webhook configurations,
re-issued before it expires, CA rotation keeps the old CA trusted, replicas racing agree."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import ssl
import types

import pytest
from cryptography import x509

from admission.certs import issue
from admission.certs import keeper as certs
from admission.kube import errors, fake, kinds

NS = "fitgate-system"
T0 = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
CONFIG = issue.CertConfig(namespace=NS, secret_name="fitgate-webhook-tls",
                          service_name="fitgate", mutating_webhook="fitgate",
                          validating_webhook="fitgate",
                          validity=datetime.timedelta(days=365),
                          renew_before=datetime.timedelta(days=30))


def _hook(name: str) -> dict:
    return {"name": name, "clientConfig": {"service": {"name": "fitgate", "namespace": NS}}}


def _cluster() -> fake.FakeClient:
    c = fake.FakeClient()
    c.seed(kinds.MUTATING_WEBHOOK_CONFIGURATION, {
        "metadata": {"name": "fitgate"},
        "webhooks": [_hook("gate.jobs.fitgate.io"), _hook("placement.pods.fitgate.io")]})
    c.seed(kinds.VALIDATING_WEBHOOK_CONFIGURATION, {
        "metadata": {"name": "fitgate"}, "webhooks": [_hook("validate.jobs.fitgate.io")]})
    return c


def _clock(at: datetime.datetime) -> certs.Clock:
    return lambda: at


def _secret(c: fake.FakeClient) -> issue.Bundle:
    obj = c.find(kinds.SECRET, CONFIG.secret_name, NS)
    assert obj is not None
    bundle = issue.Bundle.from_secret(obj)
    assert bundle is not None
    return bundle


def _ca_bundles(c: fake.FakeClient) -> list[bytes]:
    out = []
    for kind in (kinds.MUTATING_WEBHOOK_CONFIGURATION, kinds.VALIDATING_WEBHOOK_CONFIGURATION):
        obj = c.find(kind, "fitgate")
        assert obj is not None
        out += [base64.b64decode(h["clientConfig"]["caBundle"]) for h in obj["webhooks"]]
    return out


def _serving(bundle: issue.Bundle) -> x509.Certificate:
    return x509.load_pem_x509_certificate(bundle.cert)


async def test_first_pass_creates_the_secret_and_every_webhook_trusts_its_ca() -> None:
    c = _cluster()
    out = await certs.ensure(c, CONFIG, _clock(T0))
    assert out.secret == "created" and out.missing == ()
    assert sorted(out.ca_bundle_patched) == ["MutatingWebhookConfiguration/fitgate",
                                             "ValidatingWebhookConfiguration/fitgate"]
    bundle = _secret(c)
    assert c.find(kinds.SECRET, CONFIG.secret_name, NS)["type"] == "kubernetes.io/tls"
    cert = _serving(bundle)
    ca = x509.load_pem_x509_certificates(bundle.ca_cert)[0]
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == [
        "fitgate.fitgate-system.svc", "fitgate.fitgate-system.svc.cluster.local"]
    assert cert.not_valid_after_utc == T0 + datetime.timedelta(days=365)
    assert _ca_bundles(c) == [bundle.ca_cert] * 3


async def test_the_pair_serves_tls_that_the_ca_bundle_verifies(tmp_path) -> None:
    """What the API server does: verify the served certificate with the caBundle, by
    Service DNS name (a real TLS handshake over loopback)."""
    c = _cluster()
    await certs.ensure(c, CONFIG)
    bundle = _secret(c)
    (tmp_path / "tls.crt").write_bytes(bundle.cert)
    (tmp_path / "tls.key").write_bytes(bundle.key)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cadata=_ca_bundles(c)[0].decode())
    async with server:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx,
            server_hostname="fitgate.fitgate-system.svc")
        assert await reader.read() == b"ok"
        writer.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                          server_hostname="other.fitgate-system.svc")


async def test_second_pass_writes_nothing() -> None:
    c = _cluster()
    await certs.ensure(c, CONFIG, _clock(T0))
    writes = len(c.verbs("patch")) + len(c.verbs("create"))
    out = await certs.ensure(c, CONFIG, _clock(T0 + datetime.timedelta(days=100)))
    assert out == certs.Outcome("unchanged", (), (), ())
    assert len(c.verbs("patch")) + len(c.verbs("create")) == writes


async def test_serving_certificate_renewed_before_expiry_with_the_same_ca() -> None:
    c = _cluster()
    await certs.ensure(c, CONFIG, _clock(T0))
    before = _secret(c)
    later = T0 + datetime.timedelta(days=336)  # 29 days before expiry
    out = await certs.ensure(c, CONFIG, _clock(later))
    after = _secret(c)
    assert out.secret == "rotated" and "expires" in out.reasons[0]
    assert after.ca_cert == before.ca_cert and after.cert != before.cert
    assert _serving(after).not_valid_after_utc == later + datetime.timedelta(days=365)
    assert out.ca_bundle_patched == ()  # the CA did not change


async def test_ca_rotation_keeps_the_old_ca_trusted_until_it_expires() -> None:
    c = _cluster()
    await certs.ensure(c, CONFIG, _clock(T0))
    old = _secret(c)
    near_ca_end = T0 + issue.CA_VALIDITY - datetime.timedelta(days=10)
    out = await certs.ensure(c, CONFIG, _clock(near_ca_end))
    new = _secret(c)
    assert out.secret == "rotated" and "CA expires" in out.reasons[0]
    cas = x509.load_pem_x509_certificates(new.ca_cert)
    assert len(cas) == 2 and cas[1] == x509.load_pem_x509_certificates(old.ca_cert)[0]
    _serving(new).verify_directly_issued_by(cas[0])
    assert _ca_bundles(c) == [new.ca_cert] * 3
    # The next CA rotation keeps the one it replaces and drops the first, now expired.
    much_later = near_ca_end + issue.CA_VALIDITY - datetime.timedelta(days=10)
    await certs.ensure(c, CONFIG, _clock(much_later))
    third = x509.load_pem_x509_certificates(_secret(c).ca_cert)
    assert len(third) == 2 and third[1] == cas[0] and cas[1] not in third


@pytest.mark.parametrize("data", [
    {"tls.crt": "bm90IGEgY2VydA==", "tls.key": "bm9wZQ=="},
    {"ca.crt": "!!", "ca.key": "", "tls.crt": "", "tls.key": ""},
], ids=["missing-ca", "not-base64"])
async def test_an_unreadable_secret_is_reissued(data: dict) -> None:
    c = _cluster()
    c.seed(kinds.SECRET, {"metadata": {"name": CONFIG.secret_name, "namespace": NS},
                          "type": "kubernetes.io/tls", "data": data})
    out = await certs.ensure(c, CONFIG, _clock(T0))
    assert out.secret == "rotated" and out.reasons == ("the Secret holds no certificate",)
    _serving(_secret(c)).verify_directly_issued_by(
        x509.load_pem_x509_certificates(_secret(c).ca_cert)[0])


async def test_a_certificate_for_another_service_is_reissued() -> None:
    c = _cluster()
    other = issue.CertConfig(**{**CONFIG.__dict__, "service_name": "old-name"})
    await certs.ensure(c, other, _clock(T0))
    out = await certs.ensure(c, CONFIG, _clock(T0))
    assert out.secret == "rotated" and "names" in out.reasons[0]


async def test_a_replica_that_loses_the_create_race_adopts_the_winners_secret() -> None:
    c = _cluster()
    winner = _cluster()
    await certs.ensure(winner, CONFIG, _clock(T0))
    theirs = winner.find(kinds.SECRET, CONFIG.secret_name, NS)

    # The other replica creates the Secret between our get (NotFound) and our create.
    real_create = c.create

    async def create_after_rival(kind, obj):
        c.seed(kinds.SECRET, theirs)
        return await real_create(kind, obj)

    c.create = create_after_rival  # type: ignore[method-assign]
    out = await certs.ensure(c, CONFIG, _clock(T0))
    assert out.secret == "unchanged"
    assert _secret(c) == issue.Bundle.from_secret(theirs)
    assert _ca_bundles(c)[0] == _secret(c).ca_cert


async def test_a_conflicting_rotation_reads_again() -> None:
    c = _cluster()
    await certs.ensure(c, CONFIG, _clock(T0))
    c.fail_next(errors.Conflict("modified"), verb="patch", kind=kinds.SECRET)
    out = await certs.ensure(c, CONFIG, _clock(T0 + datetime.timedelta(days=340)))
    assert out.secret == "rotated"
    assert len([x for x in c.verbs("patch", kinds.SECRET)]) == 2


async def test_missing_webhook_configuration_is_reported_and_the_other_patched() -> None:
    c = _cluster()
    c.remove(kinds.VALIDATING_WEBHOOK_CONFIGURATION, "fitgate")
    out = await certs.ensure(c, CONFIG, _clock(T0))
    assert out.missing == ("ValidatingWebhookConfiguration/fitgate",)
    assert out.ca_bundle_patched == ("MutatingWebhookConfiguration/fitgate",)


async def test_ca_bundle_patch_is_guarded_by_the_webhook_names() -> None:
    ops = certs.ca_bundle_patch({"webhooks": [_hook("a.x.io"), _hook("b.x.io")]}, "Q0E=")
    assert ops[0] == {"op": "test", "path": "/webhooks/0/name", "value": "a.x.io"}
    assert [o["path"] for o in ops if o["op"] == "add"] == [
        "/webhooks/0/clientConfig/caBundle", "/webhooks/1/clientConfig/caBundle"]


async def test_run_retries_after_an_outage() -> None:
    c = _cluster()
    c.fail_next(errors.ApiError(503, "ServiceUnavailable", "down"), verb="get")
    seen: list[object] = []
    done = asyncio.Event()

    def on_outcome(o: certs.Outcome) -> None:
        seen.append(o)
        done.set()

    task = asyncio.create_task(certs.run(c, CONFIG, retry_s=0.01, on_outcome=on_outcome,
                                         on_error=seen.append))
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    assert isinstance(seen[0], errors.ApiError)
    assert isinstance(seen[1], certs.Outcome) and seen[1].secret == "created"


async def test_every_replica_writes_the_pair_into_its_cert_dir(tmp_path) -> None:
    c = _cluster()
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    out = await certs.ensure(c, dataclasses.replace(CONFIG, cert_dir=str(first)), _clock(T0))
    assert out.files_written
    again = await certs.ensure(c, dataclasses.replace(CONFIG, cert_dir=str(first)),
                               _clock(T0))
    assert not again.files_written  # unchanged files are not rewritten (no reload)
    other = await certs.ensure(c, dataclasses.replace(CONFIG, cert_dir=str(second)),
                               _clock(T0))
    assert other.secret == "unchanged" and other.files_written
    bundle = _secret(c)
    for d in (first, second):
        assert (d / "tls.crt").read_bytes() == bundle.cert
        assert (d / "tls.key").read_bytes() == bundle.key
        assert (d / "tls.key").stat().st_mode & 0o077 == 0
        assert sorted(p.name for p in d.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    rotated = await certs.ensure(c, dataclasses.replace(CONFIG, cert_dir=str(first)),
                                 _clock(T0 + datetime.timedelta(days=340)))
    assert rotated.files_written and (first / "tls.crt").read_bytes() == _secret(c).cert


CHART_ENV = {"FITGATE_CERT_MODE": "self-managed", "FITGATE_CERT_SECRET": "fg-webhook-tls",
             "FITGATE_WEBHOOK_SERVICE": "fg", "FITGATE_MUTATING_WEBHOOK_CONFIGURATION": "fg",
             "FITGATE_VALIDATING_WEBHOOK_CONFIGURATION": "fg",
             "FITGATE_CERT_VALIDITY_DAYS": "90", "FITGATE_CERT_RENEW_BEFORE_DAYS": "10"}


def test_settings_from_the_charts_environment() -> None:
    cfg = certs.from_env(CHART_ENV, "ns", "/etc/fitgate/tls")
    assert cfg == issue.CertConfig(namespace="ns", secret_name="fg-webhook-tls",
                                   service_name="fg", mutating_webhook="fg",
                                   validating_webhook="fg",
                                   validity=datetime.timedelta(days=90),
                                   renew_before=datetime.timedelta(days=10),
                                   cert_dir="/etc/fitgate/tls")
    assert cfg.dns_names == ("fg.ns.svc", "fg.ns.svc.cluster.local")
    assert certs.from_env({}, "ns", None) is None
    assert certs.from_env({"FITGATE_CERT_MODE": "cert-manager"}, "ns", None) is None


@pytest.mark.parametrize("change, complaint", [
    ({"FITGATE_CERT_MODE": "vault"}, "FITGATE_CERT_MODE='vault'"),
    ({"FITGATE_CERT_SECRET": ""}, "needs FITGATE_CERT_SECRET"),
    ({"FITGATE_CERT_VALIDITY_DAYS": "ninety"}, "whole number of days"),
    ({"FITGATE_CERT_RENEW_BEFORE_DAYS": "90"}, "must be less than"),
    ({"FITGATE_CERT_RENEW_BEFORE_DAYS": "0"}, "at least 1"),
], ids=["mode", "missing-secret", "not-a-number", "renew-after-expiry", "zero"])
def test_bad_settings_are_named(change: dict, complaint: str) -> None:
    with pytest.raises(certs.CertConfigError, match=complaint.replace("(", r"\(")):
        certs.from_env({**CHART_ENV, **change}, "ns", None)


async def test_the_keeper_starts_only_once_the_files_exist_and_keeps_them(tmp_path) -> None:
    c = _cluster()
    c.fail_next(errors.ApiError(503, "ServiceUnavailable", "down"), verb="get", times=2)
    keeper = certs.CertificateKeeper(c, dataclasses.replace(CONFIG, cert_dir=str(tmp_path)),
                                     retry_s=0.01, interval_s=0.01)
    await asyncio.wait_for(keeper.start(), 5)
    assert (tmp_path / "tls.crt").read_bytes() == _secret(c).cert  # before start returned
    c.remove(kinds.SECRET, CONFIG.secret_name, NS)  # someone deletes the Secret

    async def recreated() -> None:
        while c.find(kinds.SECRET, CONFIG.secret_name, NS) is None:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(recreated(), 5)
    await keeper.stop()
    # The pass that re-created the Secret wrote its new pair into the files.
    assert (tmp_path / "tls.crt").read_bytes() == _secret(c).cert
    assert (tmp_path / "tls.key").read_bytes() == _secret(c).key


def _ctx(cert_dir: str | None) -> object:
    return types.SimpleNamespace(config=types.SimpleNamespace(namespace="ns",
                                                              cert_dir=cert_dir),
                                 api=fake.FakeClient())


def test_serve_component_runs_a_keeper_only_in_self_managed_mode() -> None:
    assert certs.component(_ctx("/tls"), env={}).servers == ()
    (keeper,) = certs.component(_ctx("/tls"), env=CHART_ENV).servers
    assert isinstance(keeper, certs.CertificateKeeper)
    assert keeper.config.cert_dir == "/tls" and keeper.config.namespace == "ns"
    with pytest.raises(certs.CertConfigError, match="needs cert_dir"):
        certs.component(_ctx(None), env=CHART_ENV)


def test_the_keeper_starts_before_the_webhook_server() -> None:
    from admission.app import components
    from admission.webhook import component as webhook
    order = components.factories()
    assert order.index(certs.component) < order.index(webhook.component)
