"""`fitgate release --all`: every gate fitgate holds is removed, its own requests and
templates are deleted, nothing else is touched, a second run finds nothing, and every call
is one the uninstall hook's RBAC (`rbac.RELEASE_ALL`) grants."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admission import constants as c
from admission.app import cli, release_all
from admission.gate import predicates as gating
from admission.kube import errors, fake, kinds, rbac
from tests.admission import builders as b


def job(name: str, gated_by: str | None, ns: str = b.NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if gated_by is not None:
        meta["annotations"] = {gating.GATED_BY: gated_by, "keep": "me"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {}}


def pod(name: str, gates: list[str], label: str = c.PLACEMENT_LABEL) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": b.NS, "labels": {label: "uid-1"}},
            "spec": {"containers": [{"name": "main"}],
                     "schedulingGates": [{"name": g} for g in gates]}}


def managed(kind: kinds.Kind, name: str, ours: bool = True) -> dict[str, Any]:
    labels = {c.MANAGED_LABEL: "fitgate" if ours else "someone-else"}
    return {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "namespace": b.NS, "labels": labels}, "spec": {}}


def world() -> fake.FakeClient:
    api = fake.FakeClient(permissions=rbac.RELEASE_ALL)
    api.seed(kinds.JOB, job("only-us", gating.GATE))
    api.seed(kinds.JOB, job("us-and-another", f"other.io/gate, {gating.GATE}"))
    api.seed(kinds.JOB, job("another", "other.io/gate"))
    api.seed(kinds.JOB, job("plain", None))
    api.seed(kinds.JOBSET, {**job("set", gating.GATE), "apiVersion": "jobset.x-k8s.io/v1alpha2",
                            "kind": "JobSet"})
    api.seed(kinds.POD, pod("gated", ["other.io/gate", c.SCHEDULING_GATE]))
    api.seed(kinds.POD, pod("gated-w", [c.SCHEDULING_GATE], c.PLACEMENT_WORKLOAD_LABEL))
    api.seed(kinds.POD, pod("released", ["other.io/gate"]))
    for kind in (kinds.PROVISIONING_REQUEST, kinds.POD_TEMPLATE):
        api.seed(kind, managed(kind, "ours"))
        api.seed(kind, managed(kind, "theirs", ours=False))
    api.seed(kinds.ADMISSION_CHECK, b.admission_check("topo-fit"))
    api.seed(kinds.ADMISSION_CHECK, b.admission_check("other", controller="x.io/y"))
    api.seed(kinds.CLUSTER_QUEUE, b.cluster_queue("gpu", "topo-fit", "other"))
    api.seed(kinds.CLUSTER_QUEUE, b.cluster_queue("cpu", "other"))
    return api


def ann(api: fake.FakeClient, name: str, kind: kinds.Kind = kinds.JOB) -> dict[str, Any]:
    obj = api.find(kind, name, b.NS)
    assert obj is not None
    return obj["metadata"].get("annotations") or {}


def gates_of(api: fake.FakeClient, name: str) -> list[str]:
    obj = api.find(kinds.POD, name, b.NS)
    assert obj is not None
    return [g["name"] for g in obj["spec"].get("schedulingGates") or []]


async def test_removes_only_fitgates_gates_and_objects_and_is_idempotent() -> None:
    api = world()
    report = await release_all.release_all(api)
    assert sorted(report.jobs) == [f"Job {b.NS}/only-us", f"Job {b.NS}/us-and-another",
                                   f"JobSet {b.NS}/set"]
    assert gating.GATED_BY not in ann(api, "only-us")
    assert ann(api, "only-us")["keep"] == "me"
    assert ann(api, "us-and-another")[gating.GATED_BY] == "other.io/gate"
    assert ann(api, "another")[gating.GATED_BY] == "other.io/gate"
    assert gating.GATED_BY not in ann(api, "set", kinds.JOBSET)
    assert sorted(report.pods) == [f"Pod {b.NS}/gated", f"Pod {b.NS}/gated-w"]
    assert gates_of(api, "gated") == ["other.io/gate"]
    assert gates_of(api, "gated-w") == []
    assert gates_of(api, "released") == ["other.io/gate"]
    for kind in (kinds.PROVISIONING_REQUEST, kinds.POD_TEMPLATE):
        assert [o["metadata"]["name"] for o in api.objects(kind)] == ["theirs"]
    assert report.provisioning_requests == [f"ProvisioningRequest {b.NS}/ours"]
    assert report.pod_templates == [f"PodTemplate {b.NS}/ours"]
    assert report.cluster_queues == {"gpu": ["topo-fit"]}
    assert "ClusterQueue gpu still uses fitgate's AdmissionCheck topo-fit" in report.to_text()

    writes = len(api.verbs("patch")) + len(api.verbs("delete"))
    again = await release_all.release_all(api)
    assert (again.jobs, again.pods, again.provisioning_requests, again.pod_templates) == (
        [], [], [], [])
    assert len(api.verbs("patch")) + len(api.verbs("delete")) == writes


async def test_dry_run_changes_nothing() -> None:
    api = world()
    report = await release_all.release_all(api, dry_run=True)
    assert len(report.jobs) == 3 and len(report.pods) == 2
    assert report.provisioning_requests == [f"ProvisioningRequest {b.NS}/ours"]
    assert api.verbs("patch") == [] and api.verbs("delete") == []
    assert ann(api, "only-us")[gating.GATED_BY] == gating.GATE
    assert "would remove fitgate's admission gate from 3 job(s)" in report.to_text(True)


async def test_a_job_changed_under_the_patch_is_read_again() -> None:
    api = world()
    api.fail_next(errors.ApiError(422, "Invalid", "test operation failed"), verb="patch",
                  kind=kinds.JOB)
    report = await release_all.release_all(api)
    assert len(report.jobs) == 3
    assert gating.GATED_BY not in ann(api, "only-us")
    assert [call.name for call in api.verbs("get", kinds.JOB)] == ["only-us"]


async def test_kinds_not_served_are_skipped() -> None:
    api = world()
    api.fail_next(errors.NotFound("the server could not find the requested resource"),
                  verb="list", kind=kinds.RAY_JOB)
    report = await release_all.release_all(api)
    assert report.kinds_not_served == ["ray.io/v1/RayJob"]
    assert len(report.jobs) == 3


async def test_an_undeclared_call_fails_the_test() -> None:
    """The permissions table is enforced: `release_all` cannot drift from the hook's RBAC."""
    api = fake.FakeClient(permissions=rbac.RELEASE_ALL)
    with pytest.raises(rbac.Undeclared):
        await api.list(kinds.NODE)


def test_cli_release_all_prints_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    api = world()

    async def connect(kubeconfig: str | None, context: str | None) -> fake.FakeClient:
        assert (kubeconfig, context) == ("/k", "ctx")
        return api

    args = cli._parser().parse_args(["release", "--all", "-o", "json", "--kubeconfig", "/k",
                                     "--context", "ctx"])
    assert cli.run_release(args, connect=connect) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["jobs"]) == 3 and out["cluster_queues"] == {"gpu": ["topo-fit"]}


def test_cli_release_needs_all(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["release"])
    assert exc.value.code == 2
    assert "--all" in capsys.readouterr().err


def test_cli_release_connects_with_the_hooks_permissions(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The real client checks each call against the table it is given: `fitgate release`
    gives it RELEASE_ALL (not serve's table, which has no list on JobSets)."""
    from admission.kube import client

    seen: dict[str, Any] = {}

    async def connect(kubeconfig: str | None, context: str | None, **kw: Any
                      ) -> fake.FakeClient:
        seen.update(kw)
        return world()

    monkeypatch.setattr(client.ApiClient, "connect", connect)
    assert cli.main(["release", "--all"]) == 0
    assert seen["permissions"] is rbac.RELEASE_ALL
    assert "removed fitgate's admission gate from 3 job(s)" in capsys.readouterr().out
