"""The gang of a Workload: assignments, flavors, and bad input named by object and field."""

from __future__ import annotations

from typing import Any

import pytest

import fitcore
from admission.engine import gangs
from admission.kube import kinds, store
from tests.admission import world as w
from tests.fitcore import builders as b
from tests.gang import builders as gb


def stores(*objs: dict[str, Any]) -> dict[str, store.Store]:
    out = {"templates": store.Store(kinds.RESOURCE_CLAIM_TEMPLATE),
           "flavors": store.Store(kinds.RESOURCE_FLAVOR)}
    for o in objs:
        out["templates" if o["kind"] == "ResourceClaimTemplate" else "flavors"].seed(o)
    return out


def test_admitted_counts_flavor_labels_and_tolerations() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    wl = w.admitted(w.workers(4, min_count=2), flavors={"cpu": "a100"}, counts={"workers": 3})
    s = stores(gb.template("gpus"), w.flavor("a100", {"pool": "a100"}, [toleration]))
    wg = gangs.gang_of(wl, **s)
    (ps,) = wg.gang.pod_sets
    assert ps.count == 3 and ps.min_count is None
    assert ps.node_selector == {"pool": "a100"}
    assert [t.key for t in ps.tolerations] == ["gpu"]
    assert wg.assignments is not None
    assert wg.assignments["workers"].node_labels == {"pool": "a100"}
    assert wg.assignments["workers"].flavors == {"cpu": "a100"}


def test_not_admitted_has_no_assignments() -> None:
    wl = w.admitted(w.workers(4), reserved=False)
    wg = gangs.gang_of(wl, **stores(gb.template("gpus")))
    assert wg.assignments is None
    assert wg.gang.pod_sets[0].count == 4


def _cel_broken() -> dict[str, Any]:
    t = gb.template("gpus")
    t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['x'].y ==="}}]
    return t


@pytest.mark.parametrize("case,objs,change,expect", [
    ("missing-template", [], None,
     "spec.podSets[0].template.spec.resourceClaims[0].resourceClaimTemplateName: "
     "ResourceClaimTemplate default/gpus not found"),
    ("count-out-of-range", [gb.template("gpus")], {"count": 9},
     "status.admission.podSetAssignments[0].count: 9 is out of range: pod set 'workers' has "
     "count 2"),
    ("unknown-flavor", [gb.template("gpus")], {"flavors": {"cpu": "nope"}},
     "status.admission.podSetAssignments[0].flavors: ResourceFlavor nope not found"),
    ("unknown-pod-set", [gb.template("gpus")], {"name": "ghost"},
     "status.admission.podSetAssignments[0].name: no pod set 'ghost' in spec.podSets"),
    ("cel-does-not-compile", [_cel_broken()], None, "CEL does not compile"),
], ids=lambda v: v if isinstance(v, str) and "-" in v else "")
def test_bad_input_names_object_and_field(case: str, objs: list[dict[str, Any]],
                                          change: dict[str, Any] | None, expect: str) -> None:
    wl = w.admitted(w.workers(2))
    if change:
        wl["status"]["admission"]["podSetAssignments"][0].update(change)
    with pytest.raises(fitcore.InputError) as exc:
        gangs.gang_of(wl, **stores(w.flavor(), *objs))
    assert "Workload default/train" in str(exc.value) or "ResourceClaimTemplate" in str(
        exc.value)
    assert expect in str(exc.value)


def test_flavor_contradicting_the_template_selector_is_bad_input() -> None:
    wl = w.admitted(w.workers(2, node_selector={"pool": "h100"}), flavors={"cpu": "a100"})
    with pytest.raises(fitcore.InputError) as exc:
        gangs.gang_of(wl, **stores(gb.template("gpus"), w.flavor("a100", {"pool": "a100"})))
    assert ("spec.podSets[0].template.spec.nodeSelector['pool']: is 'h100', but the assigned "
            "flavor's nodeLabels say 'a100'") in str(exc.value)


def test_shared_claims_come_from_the_claims_store() -> None:
    wl = w.admitted(gb.pod_set("workers", 1, shared=("fabric",)))
    claims = store.Store(kinds.RESOURCE_CLAIM)
    claims.seed(gb.shared_claim("fabric", b.req("nic", "nic")))
    wg = gangs.gang_of(wl, **stores(w.flavor()), claims=claims)
    assert wg.gang.pod_sets[0].claims[0].shared
