"""podSetUpdates are additive and never collide with template, flavor or another check."""

from __future__ import annotations

from typing import Any

import pytest

from admission import constants as c
from admission.check import podsetupdates
from admission.engine import gangs
from admission.kube import kinds, store
from fitcore import gang
from tests.admission import world as w
from tests.gang import builders as gb

UID = "u-1"


def build(wl: dict[str, Any], placements: list[gang.Placement],
          domains: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
          flavors: tuple[dict[str, Any], ...] = ()) -> podsetupdates.Updates:
    wl["metadata"]["uid"] = UID
    templates = store.Store(kinds.RESOURCE_CLAIM_TEMPLATE)
    templates.seed(gb.template("gpus"))
    fl = store.Store(kinds.RESOURCE_FLAVOR)
    fl.seed(w.flavor(), *flavors)
    wg = gangs.gang_of(wl, templates=templates, flavors=fl)
    return podsetupdates.build(wl, "fitgate", wg, placements, domains or {}, annotations)


ONE_NODE = [gang.Placement("workers", 0, "n1"), gang.Placement("workers", 1, "n1")]
TWO_NODES = [gang.Placement("workers", 0, "n1"), gang.Placement("workers", 1, "n2")]


def test_labels_and_a_single_node_pin() -> None:
    u = build(w.admitted(w.workers(2)), ONE_NODE)
    assert u.pod_set_updates == [{"name": "workers",
                                  "labels": {c.PLACEMENT_LABEL: UID, c.POD_SET_LABEL: "workers"},
                                  "nodeSelector": {c.HOSTNAME_LABEL: "n1"}}]
    assert u.notes == []


def test_one_topology_domain_pins_the_domain() -> None:
    wl = w.admitted(w.workers(2, topology=gb.RACK))
    u = build(wl, TWO_NODES, {"workers": "rack-7"})
    assert u.pod_set_updates[0]["nodeSelector"] == {gb.RACK: "rack-7"}


def test_same_value_already_set_is_not_added_again() -> None:
    wl = w.admitted(w.workers(2, node_selector={c.HOSTNAME_LABEL: "n1"}))
    u = build(wl, ONE_NODE)
    assert "nodeSelector" not in u.pod_set_updates[0]
    assert u.notes == []


@pytest.mark.parametrize("where", ["template", "other-check", "flavor"])
def test_a_colliding_node_pin_is_given_up(where: str) -> None:
    wl = w.admitted(w.workers(2, topology=gb.RACK), checks=("fitgate", "other"),
                    flavors={"cpu": "racked"} if where == "flavor" else None)
    flavors: tuple[dict[str, Any], ...] = ()
    if where == "template":
        wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {gb.RACK: "rack-1"}
    elif where == "other-check":
        wl["status"]["admissionChecks"][1]["podSetUpdates"] = [
            {"name": "workers", "nodeSelector": {gb.RACK: "rack-1"}}]
    else:
        flavors = (w.flavor("racked", {gb.RACK: "rack-1"}),)
    u = build(wl, TWO_NODES, {"workers": "rack-7"}, flavors=flavors)
    assert "nodeSelector" not in u.pod_set_updates[0]
    assert u.notes == [f"pod set workers: nodeSelector {gb.RACK} is already 'rack-1'; pods "
                       "are pinned one by one instead"]


def test_a_taken_placement_label_uses_the_workload_label() -> None:
    wl = w.admitted(w.workers(2))
    wl["spec"]["podSets"][0]["template"]["metadata"] = {"labels": {c.PLACEMENT_LABEL: "old"}}
    u = build(wl, TWO_NODES)
    assert u.pod_set_updates[0]["labels"] == {c.PLACEMENT_WORKLOAD_LABEL: UID,
                                              c.POD_SET_LABEL: "workers"}
    assert u.notes == []


def test_consume_annotations_set_by_another_check_are_not_overwritten() -> None:
    wl = w.admitted(w.workers(2), checks=("fitgate", "prov"))
    wl["status"]["admissionChecks"][1]["podSetUpdates"] = [
        {"name": "workers", "annotations": {c.CONSUME_ANNOTATION: "theirs"}}]
    u = build(wl, TWO_NODES, annotations={c.CONSUME_ANNOTATION: "ours",
                                          c.CLASS_ANNOTATION: "cls"})
    assert u.pod_set_updates[0]["annotations"] == {c.CLASS_ANNOTATION: "cls"}
    assert "annotation autoscaling.x-k8s.io/consume-provisioning-request is already set" \
        in u.notes[0]


@pytest.mark.parametrize("pending", [False, True], ids=["assigned", "delayed"])
def test_a_pod_set_kueue_tas_places_gets_the_domain_pin_only(pending: bool) -> None:
    # Kueue's TAS ungater pins each pod to a domain of its topologyAssignment, and its
    # node controller terminates pods pinned by hostname to a node outside it (e2e
    # scenario 2): so no per-pod release (placement label) and no hostname pin.
    wl = w.admitted(w.workers(2, topology=gb.RACK))
    psa = wl["status"]["admission"]["podSetAssignments"][0]
    if pending:
        psa["delayedTopologyRequest"] = "Pending"
    else:
        psa["topologyAssignment"] = {"levels": [gb.RACK], "slices": [
            {"domainCount": 1, "podCounts": {"universal": 2},
             "valuesPerLevel": [{"universal": "rack-7"}]}]}
    u = build(wl, ONE_NODE, {"workers": "rack-7"}, annotations={"a.example/consume": "pr"})
    assert u.pod_set_updates == [{"name": "workers", "nodeSelector": {gb.RACK: "rack-7"},
                                  "annotations": {"a.example/consume": "pr"}}]
    assert u.notes == ["pod set workers: Kueue's topology-aware scheduling places its pods; "
                       "fitgate pins its topology domain only"]
