"""The Kubernetes version `fitgate serve` follows (admission/app/kubeversion.py): the API
server's, read at start through the client wrapper; `kube_version` overrides it; an
unsupported server stops the start naming its version, the supported ones and the
override. The CLI states its own default."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

import fitcore
from admission import config
from admission.app import cli, kubeversion, serve
from admission.app import logging as flog
from admission.kube import client, errors, fake
from admission.runtime import metrics


def _answer(git: str, major: str | None = None, minor: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"gitVersion": git, "platform": "linux/amd64"}
    if major is not None:
        out["major"], out["minor"] = major, minor
    return out


@pytest.fixture
def restore_logs() -> Iterator[None]:
    """`flog.configure` (serve's start) sets process-wide logging: put it back after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


FOLLOWED = [
    ("1.36.3", _answer("v1.36.3", "1", "36"), "1.36"),
    ("1.37.2", _answer("v1.37.2", "1", "37"), "1.37"),
    ("gke suffix", _answer("v1.37.2-gke.100", "1", "37+"), "1.37"),
    ("gitVersion only", _answer("v1.37.2-gke.100"), "1.37"),
    ("eks", _answer("v1.36.3-eks-a1b2c3", "1", "36+"), "1.36"),
]
REFUSED = [
    ("1.35.0", _answer("v1.35.0", "1", "35"), "Kubernetes v1.35.0 (1.35)"),
    ("2.0", _answer("v2.0.0", "2", "0"), "Kubernetes v2.0.0 (2.0)"),
    ("1.38 with a suffix", _answer("v1.38.0-rc.1", "1", "38"), "v1.38.0-rc.1 (1.38)"),
    ("unreadable", {"gitVersion": "devel"}, "cannot read the API server's version"),
]


@pytest.mark.parametrize(("what", "answer", "minor"), FOLLOWED, ids=[f[0] for f in FOLLOWED])
async def test_serve_follows_the_api_servers_minor(what: str, answer: dict[str, Any],
                                                   minor: str) -> None:
    api = fake.FakeClient()
    api.server_version = answer
    cfg = await kubeversion.resolve(api, config.load(env={}))
    assert cfg.kube_version == minor
    assert [c.verb for c in api.calls] == ["version"]


@pytest.mark.parametrize(("what", "answer", "shown"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_an_unsupported_server_stops_the_start(what: str, answer: dict[str, Any],
                                                     shown: str) -> None:
    api = fake.FakeClient()
    api.server_version = answer
    with pytest.raises(kubeversion.UnsupportedVersion) as refused:
        await kubeversion.resolve(api, config.load(env={}))
    message = str(refused.value)
    assert shown in message
    assert f"fitgate follows {', '.join(fitcore.KUBE_VERSIONS)}" in message
    assert "kube_version" in message and "kubeVersion" in message


async def test_kube_version_overrides_without_asking() -> None:
    api = fake.FakeClient()
    api.server_version = _answer("v1.35.0", "1", "35")
    cfg = await kubeversion.resolve(api, config.load(env={"FITGATE_KUBE_VERSION": "1.36"}))
    assert cfg.kube_version == "1.36"
    assert api.calls == []


async def test_a_server_that_does_not_answer_stops_the_start_naming_the_override() -> None:
    api = fake.FakeClient()
    api.fail_next(errors.ApiError(0, "Unreachable", "connection refused"), verb="version",
                  times=100)
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
    with pytest.raises(kubeversion.UnsupportedVersion, match=r"GET /version.*kube_version"):
        await kubeversion.resolve(api, config.load(env={}), deadline=20, sleep=sleep)
    # Asked again with backoff, never waiting past the deadline.
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0] and sum(slept) <= 20


async def test_a_server_still_starting_is_asked_again() -> None:
    api = fake.FakeClient()
    api.server_version = {"major": "1", "minor": "37", "gitVersion": "v1.37.2"}
    api.fail_next(errors.ApiError(503, "ServiceUnavailable", "starting"), verb="version",
                  times=2)

    async def sleep(_s: float) -> None:
        return None
    cfg = await kubeversion.resolve(api, config.load(env={}), sleep=sleep)
    assert cfg.kube_version == "1.37"


async def test_a_refusal_is_not_asked_again() -> None:
    api = fake.FakeClient()
    # Refused once: were it asked again, the second answer (the version) would let it start.
    api.fail_next(errors.ApiError(403, "Forbidden", "no"), verb="version")
    with pytest.raises(kubeversion.UnsupportedVersion, match="403"):
        await kubeversion.resolve(api, config.load(env={}))


def test_the_config_defaults_to_auto_and_names_what_it_accepts() -> None:
    assert config.load(env={}).kube_version == config.AUTO == "auto"
    with pytest.raises(config.ConfigError) as bad:
        config.load(env={"FITGATE_KUBE_VERSION": "1.35"})
    assert "kube_version = '1.35' (from FITGATE_KUBE_VERSION)" in str(bad.value)
    assert "auto or one of 1.36, 1.37" in str(bad.value)


def test_the_service_is_given_the_version_it_follows() -> None:
    with pytest.raises(ValueError, match=r"kubeversion\.resolve"):
        serve.Service(config.load(env={}), fake.FakeClient())


async def test_the_followed_version_is_logged_and_labels_build_info(restore_logs: None
                                                                    ) -> None:
    out = io.StringIO()
    flog.configure("info", "json", stream=out)
    api = fake.FakeClient()
    api.server_version = _answer("v1.36.3", "1", "36")
    cfg = await kubeversion.resolve(api, config.load(env={"FITGATE_LEADER_ELECTION": "false"}))
    serve.Service(cfg, api, factories=[]).inventory.close()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [line] = [x for x in lines if x.get("event") == "serve.kube_version"]
    assert (line["kube_version"], line["source"], line["server"]) == (
        "1.36", "api-server", "v1.36.3")
    from prometheus_client import REGISTRY
    assert REGISTRY.get_sample_value("fitgate_build_info", {
        "version": metrics.version(), "kubernetes": "1.36"}) == 1


def test_fitgate_serve_refuses_an_unsupported_server(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str],
                                                     restore_logs: None) -> None:
    api = fake.FakeClient()
    api.server_version = _answer("v1.35.0", "1", "35")

    async def connect(*args: Any, **kw: Any) -> fake.FakeClient:
        return api
    monkeypatch.setattr(client.ApiClient, "connect", connect)
    for var in [v for v in os.environ if v.startswith("FITGATE_")]:
        monkeypatch.delenv(var)
    assert cli.main(["serve", "--log-format", "console"]) == 1
    err = capsys.readouterr().err
    assert "fitgate serve: the API server runs Kubernetes v1.35.0 (1.35); fitgate " \
           "follows 1.36, 1.37" in err


@pytest.mark.parametrize("command", ["fit", "verify"])
def test_the_offline_commands_state_their_default_version(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {fitcore.DEFAULT_KUBE_VERSION};" in text
    assert ", ".join(fitcore.KUBE_VERSIONS) in text


def test_fitgate_version_lists_the_versions_it_follows(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert cli.main(["version"]) == 0
    out = capsys.readouterr().out
    assert f"Kubernetes versions followed: {', '.join(fitcore.KUBE_VERSIONS)}" in out
    assert f"default {fitcore.DEFAULT_KUBE_VERSION}" in out
    assert "the API server's" in out
