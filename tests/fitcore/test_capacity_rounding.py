"""A capacity request that the allocator cannot round is an error, not "does not fit"
(upstream table: consumable-capacity-range-policy-*-rejected, 1.37). Both engines."""

from __future__ import annotations

from typing import Any

import pytest

from fitcore import api, kube, model, semantics, values, versions
from tests.fitcore import builders as b

VERSIONS = [versions.V1_36, versions.V1_37]
INT64_MAX = 2**63 - 1


def _capacity(value: str = "4", policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """One capacity `mem`; default policy: default 2, range 2..4 in steps of 2."""
    out: dict[str, Any] = {"value": value}
    out["requestPolicy"] = policy if policy is not None else {
        "default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}
    return {"mem": out}


def _fit(devices: list[dict[str, Any]], request: str, engine: str,
         kube_version: versions.KubeVersion, mode: str | None = None) -> model.NodeFit:
    inventory = kube.inventory([b.rslice("s", devices)], [b.gpu_class()], [])
    claim = b.claim("c", b.req("r", capacity={"mem": request}, mode=mode))
    return api.allocate(kube.node(b.node()), inventory, [kube.resource_claim(claim)],
                        engine=engine, kube=kube_version)  # type: ignore[arg-type]


@pytest.mark.parametrize("multi", [True, False], ids=["shared", "dedicated"])
@pytest.mark.parametrize("kube_version", VERSIONS, ids=str)
@pytest.mark.parametrize("request_text", [str(INT64_MAX), "18446744073709551616"])
def test_request_rounded_past_int64_is_an_error(engine: str, kube_version: versions.KubeVersion,
                                                multi: bool, request_text: str) -> None:
    fit = _fit([b.device("d0", capacity=_capacity(), multi=multi)], request_text, engine,
               kube_version)
    assert fit.verdict == "error" and "cannot be represented" in fit.reasons[0], fit


@pytest.mark.parametrize("kube_version", VERSIONS, ids=str)
def test_error_aborts_rather_than_trying_the_next_device(
        engine: str, kube_version: versions.KubeVersion) -> None:
    # d1 has no range and could hold the request; d0 comes first and cannot round it.
    devices = [b.device("d0", capacity=_capacity(), multi=True),
               b.device("d1", capacity={"mem": {"value": "36893488147419103232"}}, multi=True)]
    fit = _fit(devices, str(INT64_MAX), engine, kube_version)
    assert fit.verdict == "error", fit


@pytest.mark.parametrize("kube_version", VERSIONS, ids=str)
@pytest.mark.parametrize("capacity, request_text", [
    (_capacity(policy={}), str(INT64_MAX)),  # no range: nothing to round, too big to fit
    (_capacity(policy={"validRange": {"min": "2"}}), str(INT64_MAX)),  # no step
    (_capacity(value="8", policy={"validRange": {"min": "2", "step": "2"}}), "5"),
])
def test_what_is_not_rounded_past_int64_is_no_error(
        engine: str, kube_version: versions.KubeVersion, capacity: dict[str, Any],
        request_text: str) -> None:
    fit = _fit([b.device("d0", capacity=capacity, multi=True)], request_text, engine,
               kube_version)
    assert fit.verdict in ("fits", "no-fit"), fit


def test_a_device_lacking_a_requested_capacity_is_skipped_first() -> None:
    exact = model.ExactRequest("r", "gpu", capacity_requests={
        "mem": values.Quantity.parse(str(INT64_MAX)), "other": values.Quantity.parse("1")})
    device = kube.resource_slice(b.rslice("s", [b.device("d0", capacity=_capacity())])).devices[0]
    assert semantics.capacity_unrepresentable(exact, device) is None


@pytest.mark.parametrize("request_text, milli, unrepresentable", [
    # Integer path: rounding 2^63 - 2 up to the next even number is fine, 2^63 - 1 is not.
    (str(INT64_MAX - 1), False, False),
    (str(INT64_MAX), False, True),
    # Milli-units (1.37): a whole range in milli-units rounds there; the request must be a
    # whole number of milli-units within int64 too.
    ("9223372036854775", True, True),
    ("9223372036854774", True, False),
    ("1500u", True, True),
    ("1500u", False, False),
])
def test_the_rounding_paths(request_text: str, milli: bool, unrepresentable: bool) -> None:
    exact = model.ExactRequest("r", "gpu", capacity_requests={
        "mem": values.Quantity.parse(request_text)})
    policy = {"validRange": {"min": "0", "step": "2"}}
    device = kube.resource_slice(b.rslice("s", [b.device(
        "d0", capacity=_capacity(value=str(INT64_MAX), policy=policy))])).devices[0]
    found = semantics.capacity_unrepresentable(exact, device, milli=milli)
    assert (found is not None) == unrepresentable, found


FRACTIONAL = {"value": "1", "requestPolicy": {
    "default": "200m", "validRange": {"min": "200m", "max": "1", "step": "100m"}}}


@pytest.mark.parametrize("kube_version, takes, second_fits", [
    (versions.V1_36, "1", False),  # whole numbers: 250m and 200m both round up to 1
    (versions.V1_37, "300m", True),  # milli-units (DRAFractionalCapacityRange): 300m
])
def test_fractional_range_rounds_in_milli_units_in_1_37(
        engine: str, kube_version: versions.KubeVersion, takes: str, second_fits: bool) -> None:
    """Upstream table: consumable-capacity-fractional-range-gate-enabled-round-up."""
    fit = _fit([b.device("d0", capacity={"mem": FRACTIONAL}, multi=True)], "250m", engine,
               kube_version)
    assert fit.fits, fit
    assert fit.allocations[0][0].consumed_capacity == {"mem": values.Quantity.parse(takes)}
    # A share of 200m is already taken: 300m more fits within 1, a whole 1 does not.
    inventory = kube.inventory([b.rslice("s", [b.device("d0", capacity={"mem": FRACTIONAL},
                                                        multi=True)])],
                               [b.gpu_class()], [b.allocated("held", (b.GPU, "n1", "d0"),
                                                             shares={"mem": "200m"})])
    claim = b.claim("c", b.req("r", capacity={"mem": "250m"}))
    fit = api.allocate(kube.node(b.node()), inventory, [kube.resource_claim(claim)],
                       engine=engine, kube=kube_version)  # type: ignore[arg-type]
    assert fit.fits == second_fits, fit
