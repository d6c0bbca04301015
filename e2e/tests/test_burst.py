"""The burst breakdown's arithmetic (``e2e/scenarios/burst.py``) on made-up timelines:
which component a gang's seconds go to, and fitgate's share. No cluster needed."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from e2e.scenarios import burst


def _gang(name: str, explained: bool = False, **times: float) -> burst.Gang:
    g = burst.Gang(name, 1, dict(times), explained=explained)
    return g


ADMITTED = _gang("a", submit=0.0, created=0.5, workload=1.0, ungated=1.5, reserved=5.0,
                 pending=6.0, ready=6.25, admitted=8.0, scheduled=9.0)
EXPLAINED = _gang("never", explained=True, submit=0.0, created=0.5, workload=1.0,
                  ungated=3.0)
PROVISIONED = _gang("big", submit=0.0, created=0.5, workload=1.0, ungated=1.5,
                    reserved=2.0, pending=2.0, requested=2.5, provisioned=12.5, ready=13.5,
                    admitted=14.0)


@pytest.mark.parametrize(("gang", "phases"), [
    (ADMITTED, {"webhooks": 0.5, "workload": 0.5, "gate": 0.5, "quota": 3.5, "entry": 1.0,
                "check": 0.25, "admit": 1.75}),
    (EXPLAINED, {"webhooks": 0.5, "workload": 0.5, "gate": 2.0}),
    (PROVISIONED, {"webhooks": 0.5, "workload": 0.5, "gate": 0.5, "quota": 0.5, "entry": 0.0,
                   "check": 1.5, "autoscaler": 10.0, "admit": 0.5}),
    # A milestone not seen folds its phase into the next one seen.
    (_gang("no-workload", submit=0.0, created=0.5, ungated=1.5, reserved=2.0, ready=3.0,
           admitted=4.0),
     {"webhooks": 0.5, "gate": 1.0, "quota": 0.5, "check": 1.0, "admit": 1.0}),
], ids=["fits", "explained", "new-nodes", "missing-milestone"])
def test_phases_split_submit_to_decided_by_component(gang: burst.Gang,
                                                     phases: dict[str, float]) -> None:
    assert gang.phases() == phases
    assert sum(phases.values()) == gang.decided


def test_fitgates_share_is_its_phases_over_all_gang_seconds() -> None:
    meter = burst.Meter({}, "http://127.0.0.1:1/metrics", wall=20.0,
                        cpu={"fitgate": 2.0, "kueue": 5.0})
    b = burst.Breakdown([ADMITTED, EXPLAINED, PROVISIONED], meter, started=0.0)
    assert b.gang_seconds() == 8.0 + 3.0 + 14.0
    # gate 0.5 + 2.0 + 0.5, check 0.25 + 1.5
    assert b.fitgate_share() == pytest.approx(4.75 / 25.0)
    assert b.cpu_share() == pytest.approx(0.1)
    assert b.incomplete() == []
    text = "\n".join(b.lines())
    assert "19.0%" in text and "autoscaler" in text and "watch errors" not in text
    b.errors.append("Pod watch: ClientPayloadError: broken")
    assert "watch errors (1; milestones after them may be late): Pod watch" in \
        "\n".join(b.lines())
    assert b.note().startswith("fitgate's share 19.0% of gang-seconds, CPU 10.0% of a core;"
                               " biggest phases: autoscaler 40%, quota 16%, gate 12%")


def test_an_undecided_gang_is_incomplete() -> None:
    meter = burst.Meter({}, "http://127.0.0.1:1/metrics")
    stuck = _gang("stuck", submit=0.0, created=0.5, workload=1.0, ungated=1.5, reserved=2.0)
    assert burst.Breakdown([ADMITTED, stuck], meter, 0.0).incomplete() == [
        "stuck: ['created', 'reserved', 'submit', 'ungated', 'workload']"]
    # Decided, but the write Kueue adds fitgate's check with was never seen.
    unseen = _gang("unseen", submit=0.0, created=0.5, workload=1.0, ungated=1.5,
                   reserved=2.0, ready=3.0, admitted=4.0)
    assert burst.Breakdown([unseen], meter, 0.0).incomplete() == [
        "unseen: ['admitted', 'created', 'ready', 'reserved', 'submit', 'ungated', "
        "'workload']"]


def test_cpu_seconds_of_this_process_grow_while_it_works() -> None:
    before = burst.cpu_seconds(os.getpid())
    deadline = before + 0.05
    while burst.cpu_seconds(os.getpid()) < deadline:
        sum(range(10_000))
    assert burst.cpu_seconds(os.getpid()) >= deadline
    assert burst.cpu_seconds(2 ** 22 + 1) == 0.0  # no such process


def test_the_timelines_are_written_as_json(tmp_path: pathlib.Path) -> None:
    meter = burst.Meter({}, "http://127.0.0.1:1/metrics", wall=20.0, cpu={"fitgate": 2.0})
    burst.Breakdown([ADMITTED, EXPLAINED], meter, started=-1.0).write(tmp_path / "b.json")
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["gangs"]["never"] == {
        "explained": True, "phases": {"webhooks": 0.5, "workload": 0.5, "gate": 2.0},
        "times": {"submit": 1.0, "created": 1.5, "workload": 2.0, "ungated": 4.0}}
    assert data["cpu"] == {"fitgate": 2.0} and data["wall"] == 20.0
