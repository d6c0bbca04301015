"""`fitgate explain` on live objects (the project's FakeClient): the stage, the category,
the ProvisioningRequest and plan, and per pod set what the closest node or shape lacks."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

import fitcore
from admission import constants as c
from admission.app import cli
from admission.app import diagnose as explain
from admission.gate import predicates as gating
from admission.kube import errors, fake, kinds
from tests.admission import builders as ab
from tests.gang import builders as gb


def cond(type_: str, status: str = "True", reason: str = "", message: str = ""
         ) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


class Cluster:
    def __init__(self, *, gpus: int = 4, gated: bool = False,
                 explanation: dict[str, Any] | None = None, job_active: int = 0) -> None:
        self.api = fake.FakeClient()
        for obj in ab.flatten([ab.queued("topo-fit"), ab.cluster(2),
                               gb.template("gpus", gpus=gpus, namespace=ab.NS),
                               gb.shape("h100-rail", price=12)]):
            self.api.seed(kinds.BY_NAME[obj["kind"]], obj)
        ann: dict[str, str] = {}
        if gated:
            ann[gating.GATED_BY] = gating.GATE
        if explanation:
            ann[gating.EXPLANATION] = json.dumps(explanation)
        job = ab.job(annotations=ann or None)
        if job_active:
            job["status"] = {"active": job_active}
        self.job = self.api.seed(kinds.JOB, job)
        self.workload = ab.workload_of(job, uid=self.job["metadata"]["uid"])

    def with_workload(self, *conditions: dict[str, str], check: str | None = None,
                      message: str = "") -> Cluster:
        status: dict[str, Any] = {"conditions": list(conditions)}
        if check:
            status["admissionChecks"] = [{"name": "topo-fit", "state": check,
                                          "message": message}]
        self.workload["status"] = status
        self.workload = self.api.seed(kinds.WORKLOAD, self.workload)
        return self

    def with_request(self, *conditions: dict[str, str], attempt: int = 1) -> Cluster:
        uid = self.workload["metadata"]["uid"]
        plan = json.dumps({"shapes": [{"shape": "h100-rail", "count": 2,
                                       "domain": "h100-rail-new-domain-0"}], "price": "24"})
        self.api.seed(kinds.PROVISIONING_REQUEST, {
            "metadata": {"name": f"{self.workload['metadata']['name']}-topo-fit-{attempt}",
                         "namespace": ab.NS,
                         "labels": {c.WORKLOAD_UID_LABEL: uid, c.ATTEMPT_LABEL: str(attempt)},
                         "annotations": {c.PLAN_ANNOTATION: plan}},
            "spec": {"provisioningClassName": c.DEFAULT_PROVISIONING_CLASS, "podSets": []},
            "status": {"conditions": list(conditions)}})
        return self

    async def explain(self, name: str = "train", kind: str | None = "job",
                      **kw: Any) -> explain.Report:
        return await explain.explain(self.api, ab.NS, name, kind, **kw)


QUOTA = cond(c.QUOTA_RESERVED)
NO_QUOTA = cond(c.QUOTA_RESERVED, "False", "Pending", "couldn't assign flavors")

STAGES = [
    ("waiting for quota", lambda k: k.with_workload(NO_QUOTA), "couldn't assign flavors"),
    ("planning", lambda k: k.with_workload(QUOTA, check="Pending"), "fitgate plans"),
    ("provisioning", lambda k: k.with_workload(QUOTA, check="Pending").with_request(
        cond(c.ACCEPTED)), "ProvisioningRequest is accepted"),
    ("verifying", lambda k: k.with_workload(QUOTA, check="Pending").with_request(
        cond(c.ACCEPTED), cond(c.PROVISIONED)), "checks the new nodes"),
    ("admitted", lambda k: k.with_workload(QUOTA, cond(c.ADMITTED), check="Ready"),
     "pods are starting"),
    ("rejected", lambda k: k.with_workload(NO_QUOTA, check="Rejected",
                                           message="configuration: never fits"),
     "rejected it"),
    ("finished", lambda k: k.with_workload(QUOTA, cond(c.ADMITTED),
                                           cond(c.FINISHED, message="Job finished "
                                                "successfully"), check="Ready"),
     "Job finished successfully"),
]


@pytest.mark.parametrize(("stage", "build", "summary"), STAGES, ids=[s[0] for s in STAGES])
async def test_each_stage(stage: str, build: Any, summary: str) -> None:
    k = build(Cluster())
    report = await k.explain()
    assert report.stage == stage
    assert summary in report.summary
    assert report.workload == k.workload["metadata"]["name"]
    assert report.job == ("Job", "train")
    assert report.queue == {"localQueue": "q", "clusterQueue": "gpu", "checks": ["topo-fit"]}
    assert report.to_text().splitlines()[1].startswith(f"stage: {stage}: ")


async def test_running_needs_pods() -> None:
    k = Cluster(job_active=2).with_workload(QUOTA, cond(c.ADMITTED), check="Ready")
    assert (await k.explain()).stage == "running"


async def test_no_workload_yet() -> None:
    report = await Cluster(gated=True).explain()
    assert report.stage == "no workload yet" and report.workload is None
    assert "carries fitgate's gate" in report.summary


async def test_provisioning_shows_the_request_its_conditions_and_its_plan() -> None:
    k = Cluster().with_workload(QUOTA, check="Pending").with_request(
        cond(c.FAILED, reason="NoCapacity", message="quota")).with_request(
        cond(c.ACCEPTED, reason="Accepted"), attempt=2)
    report = await k.explain()
    pr = report.provisioning_request
    assert pr is not None and pr["attempt"] == 2 and pr["state"] == "accepted"
    assert pr["name"].endswith("-topo-fit-2")
    assert report.category == "capacity"
    assert report.plan == {"shapes": [{"shape": "h100-rail", "count": 2,
                                       "domain": "h100-rail-new-domain-0"}],
                           "price": "24", "source": "the ProvisioningRequest's"}
    text = report.to_text()
    assert "provisioning request" in text and "Accepted=True Accepted" in text
    assert "plan (the ProvisioningRequest's): 2 × h100-rail in h100-rail-new-domain-0" \
           "  (price 24)" in text


async def test_a_gated_gang_says_why_per_pod_set() -> None:
    held = {"gate": gating.GATE, "verdict": "unsatisfiable", "category": "configuration",
            "policyViolation": False, "reasons": ["x"], "evaluatedAt": "2026-12-03T08:00:00Z"}
    k = Cluster(gpus=6, gated=True, explanation=held)
    k.workload["metadata"]["annotations"] = {gating.GATED_BY: gating.GATE}
    k.with_workload(cond(c.QUOTA_RESERVED, "False", "AdmissionGated"))
    report = await k.explain()
    assert report.stage == "gated" and report.category == "configuration"
    assert report.gate is not None and report.gate["explanation"]["reasons"] == ["x"]
    assert report.fit is not None and report.fit["verdict"] == "unsatisfiable"
    [main] = report.fit["podSets"]
    assert main["name"] == "main" and main["count"] == 2
    assert any("ResourceClaim team-a/gpus" in r and "largest group of usable devices has 5"
               in r for r in main["reasons"])
    assert any(r.startswith("shape h100-rail:") for r in main["reasons"])
    text = report.to_text()
    assert "held back by: configuration" in text and "pod set main (2 pods):" in text


async def test_a_gang_that_needs_new_nodes_gets_a_plan_and_price_now() -> None:
    k = Cluster().with_workload(NO_QUOTA)
    k.api.seed(kinds.NODE_SHAPE, gb.shape("h100-rail", price=12))
    for name in ("gpu-0", "gpu-1"):  # no existing nodes: the shape must make room
        k.api.remove(kinds.NODE, name)
    report = await k.explain()
    assert report.fit is not None and report.fit["verdict"] == "needs-capacity"
    assert report.plan is not None and report.plan["source"] == "planned now"
    assert report.plan["price"] == "12" and report.plan["shapes"][0]["shape"] == "h100-rail"


async def test_by_workload_name_and_without_fit() -> None:
    k = Cluster().with_workload(NO_QUOTA)
    report = await k.explain(k.workload["metadata"]["name"], None, fit=False)
    assert report.job == ("Job", "train") and report.fit is None
    assert not k.api.verbs("list", kinds.NODE)
    with pytest.raises(explain.NotFound):
        await k.explain("nope", None)
    with pytest.raises(explain.NotFound, match="neither a Workload nor a job kind"):
        await k.explain("train", "cronjob")


TARGETS = [
    ("team-a/train", None, ("team-a", "train", None)),
    ("job/train", "team-a", ("team-a", "train", "job")),
    ("job/train", None, ("default", "train", "job")),
    ("workload/wl-1", "team-a", ("team-a", "wl-1", "workload")),
    ("train", "team-a", ("team-a", "train", None)),
]


@pytest.mark.parametrize(("target", "namespace", "want"), TARGETS,
                         ids=[f"{t[0]} -n {t[1]}" for t in TARGETS])
def test_targets_read_as_kubectl_spells_them(target: str, namespace: str | None,
                                             want: tuple[str, str, str | None]) -> None:
    assert cli.explain_target(target, namespace) == want


def test_the_command_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    k = Cluster()
    k.with_workload(NO_QUOTA)
    seen: list[tuple[str | None, str | None]] = []

    async def connect(kubeconfig: str | None, context: str | None) -> fake.FakeClient:
        seen.append((kubeconfig, context))
        return k.api

    args = argparse.Namespace(target="job/train", namespace=ab.NS, output="json",
                              kubeconfig="/tmp/kc", context="prod", no_fit=False)
    assert cli.run_explain(args, connect) == 0
    out = json.loads(capsys.readouterr().out)
    assert seen == [("/tmp/kc", "prod")]
    assert out["stage"] == "waiting for quota" and out["job"] == {"kind": "Job",
                                                                  "name": "train"}
    assert out["fit"]["verdict"] == "fits"
    bad = argparse.Namespace(**{**vars(args), "target": "a/b/c"})
    assert cli.run_explain(bad, connect) == cli.EXIT_BAD_INPUT


def test_without_n_the_namespace_is_the_kubeconfig_contexts(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    kc = tmp_path / "config"
    kc.write_text(json.dumps({
        "current-context": "a", "contexts": [
            {"name": "a", "context": {"cluster": "c", "namespace": "team-a"}},
            {"name": "b", "context": {"cluster": "c"}}]}))
    assert cli.context_namespace(str(kc), None) == "team-a"
    assert cli.context_namespace(str(kc), "b") is None
    monkeypatch.setenv("KUBECONFIG", str(kc))
    assert cli.context_namespace(None, None) == "team-a"
    assert cli.context_namespace(str(tmp_path / "missing"), None) is None
    # The context's namespace is a default, not an -n: NAMESPACE/NAME still reads as such.
    assert cli.explain_target("job/train", None, "team-a") == ("team-a", "train", "job")
    assert cli.explain_target("team-b/train", None, "team-a") == ("team-b", "train", None)


async def test_the_plan_now_follows_the_api_servers_kubernetes_version() -> None:
    k = Cluster().with_workload(NO_QUOTA)
    k.api.server_version = {"major": "1", "minor": "37", "gitVersion": "v1.37.2"}
    report = await k.explain()
    assert report.fit is not None and report.fit["kubeVersion"] == "1.37"
    assert report.problems == []
    assert "[rules of Kubernetes 1.37]" in report.to_text()
    k.api.server_version = {"major": "1", "minor": "36", "gitVersion": "v1.36.3"}
    report = await k.explain()
    assert report.fit is not None and report.fit["kubeVersion"] == "1.36"


async def test_a_server_version_fitgate_does_not_follow_is_a_problem_not_a_failure() -> None:
    k = Cluster().with_workload(NO_QUOTA)
    k.api.server_version = {"major": "1", "minor": "35", "gitVersion": "v1.35.0"}
    report = await k.explain()
    assert report.fit is not None and report.fit["kubeVersion"] == fitcore.DEFAULT_KUBE_VERSION
    (problem,) = report.problems
    assert problem.startswith("the API server runs Kubernetes v1.35.0") and problem.endswith(
        f"planned by the rules of Kubernetes {fitcore.DEFAULT_KUBE_VERSION}"), problem
    k.api.fail_next(errors.ApiError(500, "InternalError", "etcd is down"), verb="version")
    report = await k.explain()
    (problem,) = report.problems
    assert "etcd is down" in problem and report.fit is not None
