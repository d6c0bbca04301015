"""The FITGATE_TEST_EXIT_AT test hook: off by default, exits at exactly its step."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from admission import constants as c
from admission.kube import kinds
from admission.runtime import failpoint
from tests.admission import world as w


class Exited(BaseException):
    """Stands for the process ending (os._exit) inside the test: a BaseException, as
    SystemExit, so the reconciler's containment of a Workload's failures (which catches
    Exception) lets it through as the real exit would."""


@pytest.fixture
def world() -> Iterator[w.World]:
    out = w.World()
    yield out
    out.inventory.inner.close()


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise Exited(code)
    monkeypatch.setattr(failpoint.os, "_exit", fake_exit)
    return codes


def test_off_by_default_and_unknown_steps_are_refused() -> None:
    assert failpoint.check_environment({}) is None
    assert failpoint.check_environment({failpoint.ENV: ""}) is None
    assert failpoint.check_environment({failpoint.ENV: "planned"}) == "planned"
    with pytest.raises(failpoint.UnknownStep, match="FITGATE_TEST_EXIT_AT='plan' is not a "
                       "step; known steps: planned, requested, provisioned"):
        failpoint.check_environment({failpoint.ENV: "plan"})
    with pytest.raises(failpoint.UnknownStep):
        failpoint.reach("nowhere")


async def test_unarmed_the_reconciler_runs_through(world: w.World, exits: list[int],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(failpoint.ENV, raising=False)
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    await world.reconcile()
    assert world.request_names() == ["train-fitgate-1"]
    assert exits == []


async def test_planned_exits_before_anything_is_written(
        world: w.World, exits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoint.ENV, "planned")
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    with pytest.raises(Exited):
        await world.reconcile()
    assert exits == [failpoint.EXIT_CODE]
    assert world.requests() == [] and world.api.objects(kinds.POD_TEMPLATE) == []
    assert world.entry()["message"] == ""
    # The restarted process (hook off) plans again and asks once.
    monkeypatch.delenv(failpoint.ENV)
    await world.reconcile(world.reconciler())
    assert world.request_names() == ["train-fitgate-1"]


async def test_requested_exits_after_the_request_before_the_check_says_so(
        world: w.World, exits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoint.ENV, "requested")
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    with pytest.raises(Exited):
        await world.reconcile()
    assert world.request_names() == ["train-fitgate-1"]
    assert world.entry()["message"] == ""


async def test_provisioned_exits_before_the_nodes_are_looked_at(
        world: w.World, exits: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    world.seed(*w.base(), w.shape("h100"), w.admitted(w.workers(4)))
    await world.reconcile()
    world.set_request_condition("train-fitgate-1", c.PROVISIONED)
    world.seed(*w.node("h100-a", created=w.NEW, shape="h100"),
               *w.node("h100-b", created=w.NEW, shape="h100"))
    monkeypatch.setenv(failpoint.ENV, "provisioned")
    with pytest.raises(Exited):
        await world.reconcile(world.reconciler())
    assert "verify" not in world.inventory.calls
    assert world.entry()["state"] == "Pending"
    monkeypatch.delenv(failpoint.ENV)
    await world.reconcile(world.reconciler())
    assert world.entry()["state"] == "Ready"
    assert world.request_names() == ["train-fitgate-1"]


def test_serve_refuses_an_unknown_step_before_connecting() -> None:
    env = {**os.environ, failpoint.ENV: "after-plan"}
    proc = subprocess.run([sys.executable, "-m", "admission.app.cli", "serve",
                           "--kubeconfig", "/nonexistent"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "bad test hook: FITGATE_TEST_EXIT_AT='after-plan' is not a step" in proc.stderr


def test_exit_is_hard_and_distinct() -> None:
    code = ("from admission.runtime import failpoint; failpoint.reach('requested'); "
            "print('not reached')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, failpoint.ENV: "requested"}, timeout=60,
                          check=False)
    assert proc.returncode == failpoint.EXIT_CODE
    assert "not reached" not in proc.stdout
    assert "FITGATE_TEST_EXIT_AT=requested: exiting with 86 (test hook)" in proc.stderr
