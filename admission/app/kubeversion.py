"""The one Kubernetes version `fitgate serve` follows: the API server's, found at start.

fitcore follows the scheduler and DRA allocator of a Kubernetes minor version
(`fitcore.KUBE_VERSIONS`; what changed between them is in docs/semantics.md). `serve`
reads the API server's version (GET /version) before it builds anything and follows that
minor; the configuration field `kube_version` (default `auto`) overrides it. A server
whose minor fitcore does not follow stops the start with a message naming the server's
version, the supported ones and the override, instead of deciding by another version's
rules:

    fitgate serve: the API server runs Kubernetes v1.35.0 (1.35); fitgate follows 1.36,
    1.37. Upgrade the cluster, or set kube_version (FITGATE_KUBE_VERSION, chart value
    kubeVersion) to the version whose rules to follow.

The version followed is logged at start (`serve.kube_version`), labels the
`fitgate_build_info` metric, and `fitgate version` lists the supported ones.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

import fitcore
from admission import config
from admission.kube import client, errors

log = structlog.get_logger("fitgate.serve")

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
_NUMBER = re.compile(r"^(\d+)")


#: How long `resolve` keeps asking a server that does not answer, or answers 429 or 5xx,
#: before it gives up: a control plane still starting is no reason to exit at once.
READ_DEADLINE_S = 60.0


class UnsupportedVersion(Exception):
    """The API server's version is not one fitgate follows, or cannot be read."""


def minor_of(answer: Mapping[str, Any]) -> str | None:
    """"MAJOR.MINOR" of a /version answer: its major and minor fields (a provider's "37+"
    read as 37), else its gitVersion ("v1.37.2-gke.100" → "1.37"); None if neither
    reads."""
    major = _NUMBER.match(str(answer.get("major") or ""))
    minor = _NUMBER.match(str(answer.get("minor") or ""))
    if major and minor:
        return f"{int(major.group(1))}.{int(minor.group(1))}"
    git = _GIT_VERSION.match(str(answer.get("gitVersion") or ""))
    return f"{int(git.group(1))}.{int(git.group(2))}" if git else None


def follow(answer: Mapping[str, Any]) -> str:
    """The fitcore version to follow for an API server's /version answer; raises
    UnsupportedVersion naming the server's version and the supported ones."""
    minor = minor_of(answer)
    shown = str(answer.get("gitVersion") or "") or (minor or "unknown")
    if minor in fitcore.KUBE_VERSIONS:
        assert minor is not None
        return minor
    what = (f"the API server runs Kubernetes {shown}" + (f" ({minor})" if minor and
                                                        minor != shown.lstrip("v") else "")
            if minor else f"cannot read the API server's version from {dict(answer)!r}")
    raise UnsupportedVersion(
        f"{what}; fitgate follows {', '.join(fitcore.KUBE_VERSIONS)}. Upgrade the cluster, "
        "or set kube_version (FITGATE_KUBE_VERSION, chart value kubeVersion) to the "
        "version whose rules to follow.")


async def _read(api: client.Client, deadline: float,
                sleep: Callable[[float], Awaitable[None]]) -> Mapping[str, Any]:
    """GET /version, asked again with backoff (0.5 s doubling to 8 s) while the server
    does not answer or answers 429/5xx, until `deadline` seconds of waiting."""
    delay, waited = 0.5, 0.0
    while True:
        try:
            return await api.version()
        except errors.ApiError as exc:
            if not (exc.status in (0, 429) or exc.status >= 500) or waited + delay > deadline:
                raise
            log.warning("serve.kube_version_retry", error=str(exc), retry_in=delay)
            await sleep(delay)
            waited += delay
            delay = min(delay * 2, 8.0)


async def resolve(api: client.Client, cfg: config.Config, *,
                  deadline: float = READ_DEADLINE_S,
                  sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> config.Config:
    """`cfg` with `kube_version` set to the version to follow: the override, or the API
    server's (`follow`; a server that does not answer yet is asked again for `deadline`
    seconds). Logs which, and why."""
    if cfg.kube_version != config.AUTO:
        log.info("serve.kube_version", kube_version=cfg.kube_version, source="kube_version")
        return cfg
    try:
        answer = await _read(api, deadline, sleep)
    except errors.ApiError as exc:
        raise UnsupportedVersion(
            f"cannot read the API server's version (GET /version): {exc}. Set kube_version "
            f"(FITGATE_KUBE_VERSION, chart value kubeVersion) to one of "
            f"{', '.join(fitcore.KUBE_VERSIONS)} to start without it.") from exc
    version = follow(answer)
    log.info("serve.kube_version", kube_version=version, source="api-server",
             server=answer.get("gitVersion"))
    return cfg.model_copy(update={"kube_version": version})



async def of_server(api: client.Client, problems: list[str]) -> str:
    """The version whose rules a one-off reading (`fitgate explain`) plans by: the API
    server's, asked once; else fitcore's default, with the reason added to `problems`
    (a diagnosis still helps when /version cannot be read or is not supported)."""
    try:
        return follow(await api.version())
    except (errors.ApiError, UnsupportedVersion) as exc:
        problems.append(f"{exc}; planned by the rules of Kubernetes "
                        f"{fitcore.DEFAULT_KUBE_VERSION}")
        return fitcore.DEFAULT_KUBE_VERSION
