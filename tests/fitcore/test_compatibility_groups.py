"""A slice with a device that declares compatibility groups is ignored, so its pool is
incomplete (upstream table: compatibility-groups-disabled-*; 1.37's default allocator,
DRADeviceCompatibilityGroups alpha and off). Both engines, both readers, both versions."""

from __future__ import annotations

from typing import Any

import pytest

from fitcore import api, errors, kube, model, versions
from tests.fitcore import builders as b

GPU = b.GPU


def _uses(counter_set: str, groups: list[Any] | None = None) -> list[dict[str, Any]]:
    use: dict[str, Any] = {"counterSet": counter_set, "counters": {"mem": {"value": "1"}}}
    if groups is not None:
        use["compatibilityGroups"] = groups
    return [use]


def _pool(first_groups: list[Any] | None) -> list[dict[str, Any]]:
    """Pool p of three slices: d1 (with `first_groups`), d2 (no groups), the counters."""
    return [b.rslice("s1", [b.device("d1", counters=_uses("cs", first_groups))], pool="p",
                     count=3),
            b.rslice("s2", [b.device("d2", counters=_uses("cs"))], pool="p", count=3),
            b.counter_slice("s3", {"cs": {"mem": "4"}}, pool="p", count=3)]


def _fit(slices: list[dict[str, Any]], claim: dict[str, Any], engine: str,
         kube_version: versions.KubeVersion) -> model.NodeFit:
    inventory = kube.inventory(slices, [b.gpu_class()], [])
    return api.allocate(kube.node(b.node()), inventory, [kube.resource_claim(claim)],
                        engine=engine, kube=kube_version)  # type: ignore[arg-type]


VERSIONS = [versions.V1_36, versions.V1_37]


@pytest.mark.parametrize("kube_version", VERSIONS, ids=str)
def test_grouped_slice_leaves_its_pool_incomplete(reader: str, engine: str,
                                                   kube_version: versions.KubeVersion) -> None:
    claim = b.claim("c", b.req("r"))
    assert _fit(_pool(None), claim, engine, kube_version).fits
    assert _fit(_pool([]), claim, engine, kube_version).fits  # an empty list is no groups
    fit = _fit(_pool(["mig"]), claim, engine, kube_version)
    assert fit.verdict == "no-fit", fit
    # All over the incomplete pool is an error, as for any incomplete pool.
    fit = _fit(_pool(["mig"]), b.claim("c", b.req("r", mode="All")), engine, kube_version)
    assert fit.verdict == "error" and "being updated" in fit.reasons[0], fit


@pytest.mark.parametrize("kube_version", VERSIONS, ids=str)
def test_other_pools_stay_usable(reader: str, engine: str,
                                 kube_version: versions.KubeVersion) -> None:
    other = b.rslice("t1", [b.device("e1")], pool="q")
    fit = _fit([*_pool(["mig"]), other], b.claim("c", b.req("r")), engine, kube_version)
    assert fit.fits and fit.allocations[0][0].id == model.DeviceId(GPU, "q", "e1"), fit


@pytest.mark.parametrize("kube_version", VERSIONS, ids=str)
def test_grouped_slice_of_a_newer_generation_still_makes_the_pool_obsolete(
        reader: str, engine: str, kube_version: versions.KubeVersion) -> None:
    slices = [b.rslice("s1", [b.device("d1")], pool="p", count=2),
              b.rslice("s2", [b.device("d2", counters=_uses("cs", ["mig"]))], pool="p",
                       count=2, generation=1, node="n2"),
              b.rslice("t1", [b.device("e1")], pool="q")]
    fit = _fit(slices, b.claim("c", b.req("r", mode="All")), engine, kube_version)
    assert fit.fits and [r.id.pool for r in fit.allocations[0]] == ["q"], fit


@pytest.mark.parametrize("groups, message", [
    (["a", "b", "c"], "at most 2 entries"),
    (["a", "a"], "must not repeat"),
    (["Not_A_Label"], "compatibility group name"),
    ("mig", "must be a list"),
])
def test_groups_are_read_strictly(reader: str, groups: Any, message: str) -> None:
    with pytest.raises(errors.InputError, match=message):
        kube.resource_slice(_pool(groups)[0])
