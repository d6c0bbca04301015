"""`fitgate explain` with the credentials of a user who may read only their namespace
(issue #21 item 6): the reads the API server refuses are stated, never read as an empty
cluster, so no plan is printed; what the Job's and the Workload's annotations and
conditions say (the gate's explanation, the check's state and message, the quota
reservation) still is. The API server's refusals come from the project's FakeClient."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from admission import constants as c
from admission.app import cli
from admission.gate import predicates as gating
from admission.kube import errors, fake, kinds
from tests.admission import builders as ab
from tests.admission.app.test_diagnose import NO_QUOTA, QUOTA, Cluster, cond

#: What a Role of get/list on Jobs, Workloads, Events and Pods in one namespace does not
#: grant: every cluster-scoped kind, and the namespaced ones explain lists elsewhere.
CLUSTER_WIDE = (kinds.NODE, kinds.RESOURCE_SLICE, kinds.DEVICE_CLASS, kinds.RESOURCE_CLAIM,
                kinds.POD, kinds.NODE_SHAPE, kinds.FIT_POLICY, kinds.NAMESPACE,
                kinds.CLUSTER_QUEUE, kinds.ADMISSION_CHECK)
NAMESPACED = (kinds.LOCAL_QUEUE, kinds.PROVISIONING_REQUEST, kinds.RESOURCE_CLAIM_TEMPLATE)

HELD = {"gate": gating.GATE, "verdict": "unsatisfiable", "category": "configuration",
        "policyViolation": False,
        "reasons": ["pod set main: ResourceClaim team-a/gpus: 3 GPUs on one pcieRoot; "
                    "the largest group of usable devices has 2"],
        "evaluatedAt": "2026-12-03T08:00:00Z"}


def forbidden(kind: kinds.Kind) -> errors.ApiError:
    return errors.ApiError(403, "Forbidden", f'{kind.plural} is forbidden: User '
                           f'"system:serviceaccount:team-a:reader" cannot list resource '
                           f'"{kind.plural}"')


def namespace_only(api: fake.FakeClient, *extra: kinds.Kind) -> None:
    """The API server refuses, as RBAC would, every list a namespace reader may not make
    (each kind is listed at most once or twice by one explain)."""
    for kind in (*CLUSTER_WIDE, *NAMESPACED, *extra):
        api.fail_next(forbidden(kind), verb="list", kind=kind, times=3)


def gated_cluster() -> Cluster:
    k = Cluster(gpus=6, gated=True, explanation=HELD)
    k.workload["metadata"]["annotations"] = {gating.GATED_BY: gating.GATE}
    return k.with_workload(cond(c.QUOTA_RESERVED, "False", "AdmissionGated",
                                "held by fitgate.io/topology-fit"))


async def test_a_namespace_reader_gets_no_plan_but_the_gates_reasons() -> None:
    k = gated_cluster()
    namespace_only(k.api)
    report = await k.explain()
    assert report.stage == "gated" and report.category == "configuration"
    assert report.fit is None and report.plan is None
    assert report.no_fit is not None and "nodes" in report.no_fit \
        and "resourceslices" in report.no_fit
    refused = {(u["resource"], u["status"]) for u in report.unseen}
    assert {("nodes", 403), ("resourceslices", 403), ("deviceclasses", 403),
            ("nodeshapes", 403), ("admissionchecks", 403)} <= refused, refused
    assert report.quota == {"reserved": False, "clusterQueue": None,
                            "reason": "AdmissionGated",
                            "message": "held by fitgate.io/topology-fit"}
    text = report.to_text()
    assert "could not see (the API server refused these reads, status 403" in text
    assert "  - list nodes cluster-wide" in text
    assert "  - list resourceslices.resource.k8s.io cluster-wide" in text
    assert "no plan now: planning needs nodes, resourceslices" in text
    assert "quota: not reserved (AdmissionGated: held by fitgate.io/topology-fit)" in text
    assert "  the gate's verdict: unsatisfiable" in text
    assert "largest group of usable devices has 2" in text
    assert not any(line.startswith(("plan", "fit now", "pod set"))
                   for line in text.splitlines()), text
    as_json = report.to_json()
    assert as_json["fit"] is None and as_json["plan"] is None
    assert as_json["noFit"] == report.no_fit and as_json["unseen"] == report.unseen


async def test_the_same_gang_with_full_rbac_is_planned_now() -> None:
    report = await gated_cluster().explain()
    assert report.unseen == [] and report.no_fit is None
    assert report.fit is not None and report.fit["verdict"] == "unsatisfiable"
    assert "fit now: unsatisfiable" in report.to_text()


async def test_with_reserved_quota_it_shows_every_check_and_says_what_it_cannot_tell(
        ) -> None:
    k = Cluster().with_workload(QUOTA, check="Pending",
                                message="capacity: needs 2 new nodes of h100-rail")
    k.workload["status"]["admission"] = {"clusterQueue": "gpu"}
    k.workload = k.api.seed(kinds.WORKLOAD, k.workload)
    k.with_request(cond(c.ACCEPTED))  # there, but this user may not list it
    namespace_only(k.api)
    report = await k.explain()
    assert report.stage == "checking", report.summary
    assert "check topo-fit is Pending" in report.summary
    assert "ProvisioningRequests could not be read" in report.summary
    assert report.check is None and report.checks == [
        {"name": "topo-fit", "state": "Pending",
         "message": "capacity: needs 2 new nodes of h100-rail", "retryCount": 0}]
    assert report.category == "capacity"  # the check's message leads with it
    assert report.provisioning_request is None and report.plan is None
    text = report.to_text()
    assert "quota: reserved in ClusterQueue gpu" in text
    assert "checks (which is fitgate's is unknown: AdmissionChecks not readable):" in text
    assert "  topo-fit: Pending: capacity: needs 2 new nodes of h100-rail" in text
    assert "list provisioningrequests.autoscaling.x-k8s.io in namespace team-a" in text


async def test_a_rejected_check_reads_as_rejected_without_the_admission_checks() -> None:
    k = Cluster().with_workload(NO_QUOTA, check="Rejected",
                                message="configuration: never fits")
    namespace_only(k.api)
    report = await k.explain()
    assert report.stage == "rejected" and report.category == "configuration"
    assert report.summary.startswith("check topo-fit rejected it"), report.summary


async def test_a_kind_the_server_does_not_serve_is_empty_not_refused() -> None:
    k = Cluster().with_workload(NO_QUOTA)
    k.api.fail_next(errors.NotFound("the server could not find the requested resource"),
                    verb="list", kind=kinds.NODE_SHAPE)
    report = await k.explain()
    assert report.unseen == [] and report.fit is not None
    assert report.fit["verdict"] == "fits"


async def test_without_the_workloads_of_the_namespace_the_stage_is_unknown() -> None:
    k = Cluster(gated=True, explanation=HELD).with_workload(NO_QUOTA)
    namespace_only(k.api, kinds.WORKLOAD)
    report = await k.explain()
    assert report.stage == "unknown" and report.workload is None
    assert "Workloads of namespace team-a could not be read" in report.summary
    assert report.gate is not None and report.gate["explanation"]["category"] == \
        "configuration"
    assert any(u["resource"] == "workloads" for u in report.unseen)


def run_cli(k: Cluster, capsys: pytest.CaptureFixture[str], **kw: Any
            ) -> tuple[int, str, str]:
    async def connect(kubeconfig: str | None, context: str | None) -> Any:
        return k.api

    args = argparse.Namespace(**{"target": "job/train", "namespace": ab.NS,
                                 "output": "text", "kubeconfig": None, "context": None,
                                 "no_fit": False, **kw})
    code = cli.run_explain(args, connect)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_the_command_prints_what_it_could_not_see(capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    k = gated_cluster()
    namespace_only(k.api)
    code, out, err = run_cli(k, capsys)
    assert code == 0 and err == ""
    assert "could not see" in out and "no plan now" in out
    namespace_only(k.api)
    code, out, _ = run_cli(k, capsys, output="json")
    report = json.loads(out)
    assert code == 0 and report["fit"] is None and report["noFit"]


def test_a_target_it_may_not_read_is_one_line_and_its_own_exit_code(
        capsys: pytest.CaptureFixture[str]) -> None:
    k = gated_cluster()
    k.api.fail_next(errors.ApiError(403, "Forbidden", 'jobs.batch "train" is forbidden'),
                    verb="get", kind=kinds.JOB)
    code, out, err = run_cli(k, capsys)
    assert code == cli.EXIT_FORBIDDEN and out == ""
    assert err.count("\n") == 1 and "refused to show it (403 Forbidden)" in err, err


def test_a_server_lost_midway_is_unreachable_not_unseen(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    k = gated_cluster()
    k.api.fail_next(errors.ApiError(0, "Unreachable", "list Node: ConnectionResetError()"),
                    verb="list", kind=kinds.NODE)
    code, out, err = run_cli(k, capsys)
    assert code == cli.EXIT_UNREACHABLE and out == ""
    assert err.startswith("fitgate explain: the API server does not answer") and \
        err.count("\n") == 1, err


async def test_the_owning_job_it_may_not_read_is_noted() -> None:
    k = Cluster().with_workload(NO_QUOTA)
    k.api.fail_next(forbidden(kinds.JOB), verb="get", kind=kinds.JOB)
    report = await k.explain(k.workload["metadata"]["name"], None, fit=False)
    assert report.workload == k.workload["metadata"]["name"] and report.job is None
    assert [(u["resource"], u["verb"], u["namespace"]) for u in report.unseen] == [
        ("jobs", "get", ab.NS)]
    assert "  - get jobs.batch in namespace team-a" in report.to_text()
