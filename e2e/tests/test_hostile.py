"""No tenant can stall fitgate (issue #20's High items, end to end): `fitgate serve` against
the local control plane with real Kueue, kube-scheduler, cluster-autoscaler (kwok) and the
fake DRA driver, as in test_check.py.

Two hostile Workloads are submitted first, through one ClusterQueue:

- a Job whose claim template's selectors are a catastrophic regular expression for a
  backtracking engine (`"aaaa…!".find("^(a+)+$") == ""`, linear under RE2) and a selector
  the API server accepts (estimated cost 254,483, under its limit) but that runs 20,736
  comprehension iterations, over the CEL runtime's budget: it gets a clear configuration
  message instead of holding the leader;
- a gang of 10^9 pods on the autoscaler's node group, whose NodeShape has no `maxNodes`:
  refused at once with the number of nodes it would need, instead of planning a node per
  pod until the leader is OOM-killed.

Then a second tenant's Job, through its own ClusterQueue, is submitted and admitted on an
existing node while the hostile ones sit there, never admitted.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e import builders, harness, kube, runner
from e2e.cluster.local import cluster
from e2e.tests.test_check import CONTROLLER, GROUP, entry, fitgate  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e]

REGEX = '"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!".find("^(a+)+$") == ""'
LIST = "[" + ", ".join(str(i) for i in range(12)) + "]"
MANY_ITERATIONS = (f"{LIST}.all(a, {LIST}.all(b, {LIST}.all(c, {LIST}.all(d, "
                   "a + b + c + d >= 0))))")
ABSURD_PODS = 10**9


def said(wl: dict[str, Any] | None, check: str) -> str:
    """What the Workload says about fitgate's decision: the check's message, and the
    conditions Kueue writes from it (a Rejected check deactivates the Workload, and Kueue
    resets the check's state)."""
    if wl is None:
        return ""
    texts = [str(e.get("message") or "") for e in (wl.get("status") or {}).get(
        "admissionChecks") or [] if e.get("name") == check]
    texts += [str(c.get("message") or "") for c in (wl.get("status") or {}).get(
        "conditions") or []]
    return "\n".join(texts)


def refused(wl: dict[str, Any] | None, check: str) -> bool:
    """fitgate answered Retry or Rejected: the state itself, or Kueue's answer to it."""
    states = {e.get("state") for e in ((wl or {}).get("status") or {}).get(
        "admissionChecks") or [] if e.get("name") == check}
    evicted = kube.condition(wl, "Evicted") or {}
    return bool(states & {"Retry", "Rejected"}) or (
        "AdmissionCheck" in str(evicted.get("reason")) and check in str(evicted.get("message")))


@pytest.mark.timeout(420)
async def test_hostile_workloads_get_their_message_and_another_tenant_is_admitted(
        e2e: harness.Harness, fitgate: runner.LocalProcess) -> None:  # noqa: F811
    (node,) = await e2e.create_node_pool("hostile-gpu", 1,
                                         builders.gpu_devices(4, per_pcie_root=2))
    check = f"fitgate-{e2e.namespace}"
    await e2e.kube.apply(builders.admission_check(check, CONTROLLER))
    e2e._cluster_objects.append((builders.KUEUE, "AdmissionCheck", check))

    async def active() -> bool:
        ac = await e2e.kube.get(builders.KUEUE, "AdmissionCheck", check)
        return kube.has_condition(ac, "Active")
    await e2e.wait_for(active, 60, f"fitgate marks AdmissionCheck {check} Active")
    # Quota enough for 10^9 pods of 1m CPU: Kueue reserves it, so fitgate's check decides.
    hostile_queue = await e2e.create_queues(
        f"cq-{e2e.namespace}-hostile", admission_checks=[check],
        quota={"cpu": "2000000", "memory": "10Ti", builders.KUEUE_DRA_RESOURCE: "64"})
    tenant_queue = await e2e.create_queues(f"cq-{e2e.namespace}-tenant",
                                           admission_checks=[check])

    # 1. The hostile selectors.
    template = builders.claim_template("hostile", e2e.namespace, 2)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": REGEX}}, {"cel": {"expression": MANY_ITERATIONS}}]
    await e2e.kube.create(template)  # the API server accepts both
    submitted = time.monotonic()
    await e2e.create_job("hostile-cel", hostile_queue, parallelism=1,
                         claim_template_name="hostile",
                         node_selector={cluster.SHAPE_LABEL: "hostile-gpu"})
    # 2. The absurd gang, on the node group whose NodeShape has no maxNodes.
    await e2e.create_job("absurd", hostile_queue, parallelism=ABSURD_PODS, cpu="1m",
                         node_selector={cluster.NODEGROUP_LABEL: GROUP.name})

    async def answered(job: str) -> dict[str, Any] | None:
        wl = await e2e.workload_of_job(job)
        return wl if refused(wl, check) else None
    cel_wl = await e2e.wait_for(lambda: answered("hostile-cel"), 120,
                                "fitgate answers the hostile selector")
    absurd_wl = await e2e.wait_for(lambda: answered("absurd"), 120,
                                   "fitgate answers the absurd gang")
    print(f"hostile workloads answered {time.monotonic() - submitted:.1f} s after "
          f"submission:\n  hostile-cel: {said(cel_wl, check)[:400]}\n"
          f"  absurd: {said(absurd_wl, check)[:400]}")
    assert "iteration budget" in said(cel_wl, check), said(cel_wl, check)
    assert "fitgate plans at most" in said(absurd_wl, check), said(absurd_wl, check)

    # 3. Another tenant, submitted afterwards, is admitted while they sit there.
    await e2e.kube.create(builders.claim_template(
        "two-gpus-one-root", e2e.namespace, 2, match_attribute=builders.PCIE_ROOT))
    await e2e.create_job("second", tenant_queue, parallelism=2,
                         claim_template_name="two-gpus-one-root",
                         node_selector={cluster.SHAPE_LABEL: "hostile-gpu"})
    second_submitted = time.monotonic()

    async def admitted() -> dict[str, Any] | None:
        wl = await e2e.workload_of_job("second")
        return wl if kube.has_condition(wl, "Admitted") else None
    second = await e2e.wait_for(admitted, 120, "the second tenant's Workload admitted")
    print(f"second tenant admitted {time.monotonic() - second_submitted:.1f} s after "
          "submission")
    assert entry(second, check)["state"] == "Ready"
    assert entry(second, check)["message"].startswith(
        f"fits on existing nodes: 2 pods on 1 nodes ({node})")
    for job in ("hostile-cel", "absurd"):
        wl = await e2e.workload_of_job(job)
        assert wl is not None and not kube.has_condition(wl, "Admitted"), job
    assert fitgate.alive()
    pods = await e2e.running_pods("second", 2, 90)
    await e2e.finish_pods(pods)
