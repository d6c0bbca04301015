"""`make bench-controller`'s machinery at a tiny size: the real `fitgate serve` Service over
the FakeClient, a burst of Workloads under the feeder's events, and every Workload gets
the decision its gang calls for (what keeps the benchmark's figures honest: a decision
counted is a decision made, of the right kind)."""

from __future__ import annotations

import dataclasses
import gc

import pytest

from bench import controller

#: What each kind of gang must get from the gate and from the check.
EXPECTED = {
    "fits": ("ungated", "Ready"),
    "needs-nodes": ("ungated", "provisioning"),
    "impossible": ("held", "Rejected"),
}


@pytest.mark.timeout(60)
async def test_every_workload_gets_its_decision() -> None:
    gc.unfreeze()
    # 20 nodes in racks of 4: H100, A100 and A30 racks; gangs of at most 2 pods, so every
    # gang of a fitting kind fits on free capacity.
    result = await controller.run(20, 10, rate=200.0, timeout=30.0, rack_size=4, max_pods=2)
    gc.unfreeze()
    assert result.workloads == 10 and result.decided == 10
    kinds = sorted(set(result.expected.values()))
    assert kinds == ["fits", "impossible", "needs-nodes"]
    for key, expect in result.expected.items():
        assert (result.gate[key], result.check[key]) == EXPECTED[expect], key
    assert result.offered_per_s > 0 and result.events_per_s > 0
    assert result.lag_max_ms >= 0 and result.p99_s >= result.p50_s > 0


@pytest.mark.timeout(90)
async def test_the_webhook_decision_process_answers_and_its_peak_counts() -> None:
    # --webhook: the child decides every template and every Job of the burst; its peak
    # RSS is read from /proc and added to the RSS the table and the target give.
    gc.unfreeze()
    result = await controller.run(20, 6, rate=50.0, timeout=30.0, rack_size=4, max_pods=2,
                                  webhook=True)
    gc.unfreeze()
    assert result.decided == 6
    asked = len(controller.templates()) + 6
    assert result.webhook_answered == f"{asked}/{asked}"
    assert 20 < result.rss_webhook_mib < 2048
    row = dataclasses.asdict(result)
    shown = controller.table([row]).splitlines()[1].split()
    assert float(shown[10]) == pytest.approx(result.rss_peak_mib + result.rss_webhook_mib,
                                            abs=1)


def test_burst_mix() -> None:
    gangs = controller.burst(1000)
    counts = {k: sum(g.expect == k for g in gangs) for k in EXPECTED}
    assert counts == {"fits": 700, "needs-nodes": 200, "impossible": 100}
    assert {g.template for g in gangs if g.expect == "fits"} == set(controller.FITTING)
    assert min(g.pods for g in gangs) == 1 and max(g.pods for g in gangs) == 64
