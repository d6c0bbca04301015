"""fitgate as its users run it, on the offline kind cluster (e2e/cluster/kind).

The module fixture builds (warm: reuses) the node image and fitgate's image, creates a kind
cluster of one control plane and one worker on the container engine, and installs the stack
as users do (``stack.install``): the fake DRA driver as a DaemonSet (a real kubelet plugin),
the autoscaler's ProvisioningRequest CRD (no autoscaler runs), Kueue from its own manifests,
fitgate with ``helm install charts/fitgate``, the image and the webhook's decision budget
(so that the first submission of a gang that cannot fit is warned about) set. The cluster
is deleted at the end, also when a test or the set-up fails.

- A Job whose pods claim devices (two GPUs of one PCIe root and one NIC each), queued
  through fitgate's AdmissionCheck, is admitted, its pods are Running on the worker and
  then Succeeded, and each container's environment names exactly the devices its claims
  were allocated (the driver's CDI spec, applied by containerd when the kubelet prepared
  the claims).

- A Job whose claim asks for 3 GPUs of one PCIe root (every node has 2 per root, and no
  NodeShape offers more) is created as submitted but for the gate's annotation, warned
  about at creation, held by the gate with an explanation on the Job, and its Workload never
  gets quota.

- `helm upgrade` with a changed value (a pod annotation) rolls fitgate's Deployment to new
  pods, and every Job created (server-side dry run) while it rolls, until the old pods are
  gone, is gated: the webhook answered each review. (Without the chart's preStop sleep this
  failed: a terminating pod still in the Service's endpoints missed a review, and the Job
  gate's failurePolicy Ignore let the Job through ungated.) helm's output is shown when it
  fails or does not end; a helm that fails before it changed anything is run once more.

- The leader pod deleted mid-check: Job first holds the worker's four GPUs; Job second
  needs them too, so fitgate asks for a new node (a NodeShape like the worker) with a
  ProvisioningRequest nothing answers and waits. Deleting the leader pod then moves the
  Lease to the other replica, which finds that request instead of making a second one,
  and admits second on the worker once first is done. Watches on the requests, the
  Workloads and the Lease show exactly one request ever, no Workload admitted twice or
  evicted, and the old leader never back.

- `make demo-kind`'s scenario (``e2e/demo_kind.show``) on the module's cluster: it prints
  the gate, the check Ready, the pods Running on the worker and the devices they see.

A failing test prints the nodes' kubelet and containerd journals and the pods' events.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from admission.gate import predicates as gating
from e2e import demo_kind
from e2e.cluster.kind import cluster, objects, stack

pytestmark = [pytest.mark.e2e]

WORKLOAD_IMAGE = "fitgate.local/kind-workload:latest"
QUEUE = "kind-e2e"
JOB_TIMEOUT_S = 600
ENV_PREFIX = "FITGATE_DEVICE_"


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.KindCluster]:
    env = cluster.engine_env()
    node_image = cluster.build_node_image(env)
    image = stack.fitgate_image(env)
    name = f"fitgate-e2e-{uuid.uuid4().hex[:6]}"
    kc = cluster.KindCluster(name, tmp_path_factory.mktemp("kind"), env, node_image)
    atexit.register(kc.delete)  # also when SIGTERM ends the run before finalizers
    try:
        kc.create()
        # The webhook waits up to 2 s for a decision it has not cached (the chart's default,
        # 10 ms, lets a first submission through unwarned when the node is busy).
        stack.install(kc, image, extra=("--set", "webhook.decisionBudgetSeconds=2"))
        yield kc
    except BaseException:
        print(kc.node_logs(), file=sys.stderr)
        pods = kc.kubectl("get", "pods", "-A", "-o", "wide", check=False)
        print(pods.stdout, pods.stderr, file=sys.stderr)
        raise
    finally:
        kc.delete()
        atexit.unregister(kc.delete)


@contextlib.contextmanager
def diagnostics(kc: cluster.KindCluster) -> Iterator[None]:
    """On failure, print the pods, the events and the nodes' kubelet and containerd logs
    (pytest shows a failed test's captured output)."""
    try:
        yield
    except BaseException:
        pods = kc.kubectl("get", "pods", "-A", "-o", "wide", check=False)
        events = kc.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False)
        print("\n".join(["=== kind diagnostics ===", "--- kubectl get pods -A ---",
                         pods.stdout, pods.stderr, "--- kubectl get events -A ---",
                         events.stdout, events.stderr, kc.node_logs()]))
        raise


def _apply(kc: cluster.KindCluster, *objects: dict[str, Any]) -> None:
    kc.kubectl("apply", "--server-side", "-f", "-",
               input="\n---\n".join(json.dumps(o) for o in objects))


def _get(kc: cluster.KindCluster, *args: str) -> Any:
    return json.loads(kc.kubectl("get", *args, "-o", "json").stdout)


def _queues(kc: cluster.KindCluster, namespace: str) -> None:
    """ResourceFlavor, a ClusterQueue with fitgate's AdmissionCheck, a LocalQueue."""
    quota = {"cpu": "100", "memory": "100Gi",
             **{r: "64" for r in stack.KUEUE_DRA_RESOURCES}}
    _apply(kc,
           {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": "default"}, "spec": {}},
           {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": QUEUE},
            "spec": {"namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": list(quota), "flavors": [{
                         "name": "default", "resources": [
                             {"name": r, "nominalQuota": q} for r, q in quota.items()]}]}],
                     "admissionChecksStrategy": {"admissionChecks": [{"name": "fitgate"}]}}},
           {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": QUEUE}})
    kc.wait(lambda: _condition(_get(kc, "admissioncheck", "fitgate"), "Active"), 120,
            "fitgate's AdmissionCheck Active")
    kc.wait(lambda: _condition(_get(kc, "clusterqueue", QUEUE), "Active"), 120,
            f"ClusterQueue {QUEUE} Active")


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _claim_template(name: str, namespace: str, device_class: str, count: int,
                    match_attribute: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"devices": {"requests": [{"name": "devices", "exactly": {
        "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}}
    if match_attribute:
        spec["devices"]["constraints"] = [{"requests": ["devices"],
                                           "matchAttribute": match_attribute}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": spec}}


@pytest.fixture
def namespace(kind: cluster.KindCluster) -> Iterator[str]:
    ns = f"kind-e2e-{uuid.uuid4().hex[:6]}"
    kind.kubectl("create", "namespace", ns)
    yield ns
    kind.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.timeout(JOB_TIMEOUT_S + 120)
def test_a_dra_job_queued_through_fitgate_runs_on_a_real_worker(
        kind: cluster.KindCluster, namespace: str) -> None:
    with diagnostics(kind):
        _run_dra_job(kind, namespace)


def _run_dra_job(kind: cluster.KindCluster, namespace: str) -> None:
    _queues(kind, namespace)
    _apply(kind,
           _claim_template("two-gpus", namespace, stack.GPU_CLASS, 2,
                           "resource.kubernetes.io/pcieRoot"),
           _claim_template("one-nic", namespace, stack.NIC_CLASS, 1))
    pods_n = 2
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "devices", "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"parallelism": pods_n, "completions": pods_n, "suspend": True,
                 "backoffLimit": 0,
                 "template": {"spec": {
                     "restartPolicy": "Never",
                     "resourceClaims": [
                         {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                         {"name": "nic", "resourceClaimTemplateName": "one-nic"}],
                     "containers": [{
                         "name": "main", "image": WORKLOAD_IMAGE,
                         "imagePullPolicy": "Never",
                         # Long enough that the test sees the pod Running.
                         "command": ["/bin/sh", "-c",
                                     f"env | grep ^{ENV_PREFIX} | sort; sleep 20"],
                         "resources": {"requests": {"cpu": "50m", "memory": "16Mi"},
                                       "claims": [{"name": "gpus"}, {"name": "nic"}]}}]}}},
    }
    _apply(kind, job)

    # The gate: fitgate's webhook names itself in the Job's admission-gated-by annotation
    # and the Workload carries fitgate's AdmissionCheck; admitted once the check is Ready.
    def workload() -> dict[str, Any] | None:
        for wl in _get(kind, "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
            if any(r.get("name") == "devices" for r in wl["metadata"].get("ownerReferences", [])):
                return dict(wl)
        return None

    kind.wait(lambda: (wl := workload()) is not None and _condition(wl, "Admitted"),
              JOB_TIMEOUT_S, "the Job's Workload Admitted")
    wl = workload()
    assert wl is not None
    checks = {c["name"]: c["state"] for c in wl["status"].get("admissionChecks") or []}
    assert checks == {"fitgate": "Ready"}, checks

    # While a pod runs, its claims (made from the templates) exist and are allocated;
    # after it finishes they are deleted, so what each pod got is read while it runs.
    allocated: dict[str, dict[str, str]] = {}  # pod -> env var -> namespace/claim/request

    def pods() -> list[dict[str, Any]]:
        return list(_get(kind, "pods", "-n", namespace,
                         "-l", "batch.kubernetes.io/job-name=devices")["items"])

    def record(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        got: dict[str, str] = {}
        for ref in pod["status"].get("resourceClaimStatuses") or []:
            claim = _get(kind, "resourceclaim", "-n", namespace, ref["resourceClaimName"])
            for r in claim["status"]["allocation"]["devices"]["results"]:
                assert r["driver"] == stack.DRIVER and r["pool"] == pod["spec"]["nodeName"], r
                key = ENV_PREFIX + r["device"].upper().replace("-", "_")
                got[key] = f"{namespace}/{ref['resourceClaimName']}/{r['request']}"
        allocated[name] = got

    def all_succeeded() -> bool:
        current = pods()
        for p in current:
            if p["status"].get("phase") == "Running" and p["metadata"]["name"] not in allocated:
                record(p)
        return len(current) == pods_n and all(p["status"].get("phase") == "Succeeded"
                                              for p in current)

    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not all_succeeded():
        assert time.monotonic() < deadline, (
            f"pods of Job devices not Succeeded within {JOB_TIMEOUT_S}s: "
            + json.dumps([(p["metadata"]["name"], p["status"].get("phase"))
                          for p in pods()]))
        time.sleep(1)
    final = pods()
    assert {p["metadata"]["name"] for p in final} == set(allocated), \
        "every pod was seen Running (and its claims read) before it Succeeded"
    workers = set(kind.workers())
    for pod in final:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] in workers, f"{name} ran on {pod['spec']['nodeName']}"
        assert len(allocated[name]) == 3, f"{name}: 2 GPUs + 1 NIC, got {allocated[name]}"
        logs = kind.kubectl("logs", "-n", namespace, name).stdout
        seen = dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)
        assert seen == allocated[name], \
            f"{name}: the container saw {seen}, its claims were allocated {allocated[name]}"
    # The Job controller counts finished pods a moment after they finish (its
    # uncountedTerminatedPods step): wait for the count rather than read it once.
    kind.wait(lambda: _get(kind, "job", "-n", namespace, "devices")["status"].get(
        "succeeded") == pods_n, 60, f"Job devices counting {pods_n} succeeded pods")



@pytest.mark.timeout(300)
def test_a_gang_that_can_never_fit_is_held_and_explained(kind: cluster.KindCluster,
                                                        namespace: str) -> None:
    with diagnostics(kind):
        _queues(kind, namespace)
        _apply(kind, _claim_template("three-on-one-root", namespace, stack.GPU_CLASS, 3,
                                     "resource.kubernetes.io/pcieRoot"))
        sent: dict[str, Any] = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "too-big", "namespace": namespace,
                         "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"parallelism": 1, "completions": 1, "suspend": True, "backoffLimit": 0,
                     "template": {"spec": {
                         "restartPolicy": "Never",
                         "resourceClaims": [{"name": "gpus",
                                             "resourceClaimTemplateName": "three-on-one-root"}],
                         "containers": [{"name": "main", "image": WORKLOAD_IMAGE,
                                         "imagePullPolicy": "Never", "command": ["true"],
                                         "resources": {"claims": [{"name": "gpus"}]}}]}}}}
        # Submitted as a person would: kubectl create prints the webhook's warning.
        made = kind.kubectl("create", "-f", "-", input=json.dumps(sent))
        assert f"fitgate: Job {namespace}/too-big can never be admitted" in made.stderr, \
            made.stderr
        created = _get(kind, "job", "-n", namespace, "too-big")
        assert gating.annotations_of(created)[gating.GATED_BY] == gating.GATE
        assert created["spec"]["template"]["spec"]["resourceClaims"] == \
            sent["spec"]["template"]["spec"]["resourceClaims"]

        def explained() -> bool:
            job = _get(kind, "job", "-n", namespace, "too-big")
            return gating.EXPLANATION in gating.annotations_of(job)
        kind.wait(explained, 120, "the gate to hold too-big with an explanation")
        wls = [w for w in _get(kind, "workloads.kueue.x-k8s.io", "-n", namespace)["items"]
               if any(r.get("name") == "too-big"
                      for r in w["metadata"].get("ownerReferences", []))]
        assert len(wls) == 1 and not _condition(wls[0], "QuotaReserved"), wls
        pods = _get(kind, "pods", "-n", namespace)["items"]
        assert pods == [], [p["metadata"]["name"] for p in pods]


@pytest.mark.timeout(600)
def test_helm_upgrade_rolls_the_deployment_without_a_missed_review(
        kind: cluster.KindCluster, namespace: str) -> None:
    with diagnostics(kind):
        _queues(kind, namespace)  # the gate acts on Jobs of a LocalQueue

        def fitgate_pods() -> set[str]:
            return {p["metadata"]["name"] for p in _get(
                kind, "pods", "-n", stack.FITGATE_NAMESPACE,
                "-l", "app.kubernetes.io/name=fitgate")["items"]}
        before = fitgate_pods()
        assert before, "fitgate's pods"
        probe = {"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": "probe", "namespace": namespace,
                              "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
                 "spec": {"suspend": True, "template": {"spec": {
                     "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": WORKLOAD_IMAGE,
                                     "command": ["true"]}]}}}}
        # A changed value: a fresh pod annotation, so every run rolls the pods.
        args = ("--reuse-values", "--set", f"podAnnotations.e2e-rollout={uuid.uuid4().hex[:8]}")
        upgrade = _Background(stack.upgrade_fitgate_async(kind, args))
        reviews = 0
        try:
            # Reviews go on until helm is done and the old pods are gone (they terminate
            # after helm's --wait returns: that window must be served too).
            deadline = time.monotonic() + 400
            while upgrade.running() or fitgate_pods() & before:
                if upgrade.failed() and fitgate_pods() == before and not upgrade.retried:
                    # helm stopped before it changed anything (a failed API call of its
                    # own): say so, and run the same upgrade once more.
                    print(f"helm upgrade failed before rolling anything; once more:\n"
                          f"{upgrade.output()}")
                    upgrade.stop()
                    upgrade = _Background(stack.upgrade_fitgate_async(kind, args), retried=True)
                assert not upgrade.failed(), f"helm upgrade failed:\n{upgrade.output()}"
                assert time.monotonic() < deadline, \
                    f"helm upgrade and the old pods' termination did not end in 400s; " \
                    f"helm {'still runs' if upgrade.running() else 'exited 0'}:\n" \
                    f"{upgrade.output()}"
                out = kind.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                   input=json.dumps(probe))
                job = json.loads(out.stdout)
                assert gating.gated_by_us(job), f"review {reviews} not answered: {job}"
                reviews += 1
        finally:
            upgrade.stop()
        assert reviews > 0
        after = fitgate_pods()
        assert after and not after & before, (before, after)
        print(f"{reviews} reviews during the rollout, all answered")


class _Background:
    """A command started in the background whose output is read as it comes (a full pipe
    would stall it), to show when it fails or does not end."""

    def __init__(self, proc: subprocess.Popen[str], retried: bool = False) -> None:
        self.proc = proc
        self.retried = retried
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def running(self) -> bool:
        return self.proc.poll() is None

    def failed(self) -> bool:
        return self.proc.poll() not in (None, 0)

    def output(self) -> str:
        if not self.running():
            self.reader.join(timeout=10)
        return "".join(self.lines[-60:]) or "(no output)"

    def stop(self) -> None:
        if self.running():
            self.proc.kill()
        self.proc.wait(timeout=60)
        self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


LEASE = "fitgate-leader"  # the chart's Lease for release fitgate (names.lease)
HOLDER_SECONDS = 40  # Job first holds the worker's GPUs this long once Running
HANDOVER_TIMEOUT_S = 120
# fitgate looks again at a gang waiting on its ProvisioningRequest every 60 s
# (inputs.Settings.pending_poll_seconds), so B is Ready at most that long after A is done.
SECOND_READY_TIMEOUT_S = HOLDER_SECONDS + 60 + 120


@contextlib.contextmanager
def _node_shape_like(kc: cluster.KindCluster, node: str, name: str) -> Iterator[None]:
    """A NodeShape of nodes like `node`, deleted at the end (NodeShapes are cluster-wide)."""
    objects.apply(kc, objects.node_shape(kc, name, node))
    try:
        yield
    finally:
        kc.kubectl("delete", "nodeshape", name, "--ignore-not-found", check=False)


@contextlib.contextmanager
def _fitgate_logs_on_failure(kc: cluster.KindCluster) -> Iterator[None]:
    """On failure, print the end of every fitgate replica's log (the leader's decisions)."""
    try:
        yield
    except BaseException:
        logs = kc.kubectl("logs", "-n", stack.FITGATE_NAMESPACE, "--prefix", "--tail=150",
                          "-l", "app.kubernetes.io/name=fitgate", check=False)
        print("--- fitgate's logs ---", logs.stdout, logs.stderr, sep="\n")
        raise


def _holder_pod(lease: dict[str, Any]) -> str:
    """The pod holding the Lease ('' when released): the chart sets each replica's
    identity to its pod's name (FITGATE_IDENTITY from metadata.name)."""
    return str(lease.get("spec", {}).get("holderIdentity") or "")


@pytest.mark.timeout(600)
def test_the_leader_pod_deleted_mid_check_hands_the_gang_to_the_other_replica(
        kind: cluster.KindCluster, namespace: str) -> None:
    """Job first takes all four GPUs of the worker; Job second needs all four too, so
    fitgate's check on it plans one new node of the NodeShape and asks for it with a
    ProvisioningRequest that nothing answers (no autoscaler), and waits (Pending). The
    leader pod is deleted while it waits. The other replica must take the Lease, find the
    request the old leader made (its name is deterministic) instead of making a second,
    and admit second on the worker's GPUs once first has finished (deleting the request).
    No Workload is admitted twice or evicted."""
    started = time.monotonic()
    with diagnostics(kind), _fitgate_logs_on_failure(kind):
        objects.queues(kind, namespace, QUEUE)
        worker = kind.workers()[0]
        objects.apply(kind, objects.claim_template("four-gpus", namespace, stack.GPU_CLASS, 4))
        with _node_shape_like(kind, worker, f"like-{namespace}"), \
                objects.Watch(kind, "provisioningrequests.autoscaling.x-k8s.io",
                              "-n", namespace) as requests, \
                objects.Watch(kind, "workloads.kueue.x-k8s.io", "-n", namespace) as workloads, \
                objects.Watch(kind, "lease", LEASE, "-n", stack.FITGATE_NAMESPACE) as leases:
            old, new = _hand_over_mid_check(kind, namespace, worker)
            holders = [h for v in leases.versions() if (h := _holder_pod(v))]
            made = {v["metadata"]["uid"]: v["metadata"]["name"] for v in requests.versions()}
            history = workloads.versions()
        assert len(made) == 1, f"one ProvisioningRequest, the old leader's: {made}"
        assert kind.kubectl("get", "provisioningrequests.autoscaling.x-k8s.io", "-n",
                            namespace, "-o", "name").stdout.strip() == "", \
            "the request is deleted once second is admitted on freed capacity"
        _admitted_once(history)
        # The watch saw the old leader, then the new one, and the old one never again.
        assert holders and holders[0] == old and new in holders \
            and old not in holders[holders.index(new):], holders
    print(f"leader handover test: {time.monotonic() - started:.0f}s")


def _hand_over_mid_check(kind: cluster.KindCluster, namespace: str, worker: str
                         ) -> tuple[str, str]:
    """Runs first and second, deleting the leader while second waits; returns the pods
    that held the Lease before and after."""
    gpus = {"gpus": "four-gpus"}
    objects.apply(kind, objects.job("first", namespace, QUEUE, gpus,
                                    f"sleep {HOLDER_SECONDS}"))
    kind.wait(lambda: any(p["status"].get("phase") == "Running"
                          for p in objects.pods_of(kind, namespace, "first")),
              JOB_TIMEOUT_S, "Job first's pod Running")
    objects.apply(kind, objects.job("second", namespace, QUEUE, gpus,
                                    f"env | grep ^{ENV_PREFIX} | sort"))

    def waiting_on_request() -> bool:
        state = objects.check_state(objects.workload_of(kind, namespace, "second"))
        return state is not None and state[0] == "Pending" \
            and "ProvisioningRequest" in state[1]
    kind.wait(waiting_on_request, HANDOVER_TIMEOUT_S,
              "second's check Pending on a ProvisioningRequest")

    lease = _get(kind, "lease", "-n", stack.FITGATE_NAMESPACE, LEASE)
    old = _holder_pod(lease)
    replicas = {p["metadata"]["name"] for p in _get(
        kind, "pods", "-n", stack.FITGATE_NAMESPACE,
        "-l", "app.kubernetes.io/name=fitgate")["items"]}
    assert old in replicas and len(replicas) == 2, (lease["spec"], replicas)
    phases = [p["status"].get("phase") for p in objects.pods_of(kind, namespace, "first")]
    assert phases == ["Running"], f"first still holds the GPUs when the leader goes: {phases}"
    kind.kubectl("delete", "pod", "-n", stack.FITGATE_NAMESPACE, old, "--wait=false")

    def new_holder() -> str:
        return _holder_pod(_get(kind, "lease", "-n", stack.FITGATE_NAMESPACE, LEASE))
    kind.wait(lambda: new_holder() not in ("", old), HANDOVER_TIMEOUT_S,
              f"the Lease {LEASE} taken from {old}")
    new = new_holder()
    print(f"the Lease moved from {old} to {new}")
    state = objects.check_state(objects.workload_of(kind, namespace, "second"))
    assert state is not None and state[0] == "Pending", state

    kind.wait(lambda: _condition(objects.workload_of(kind, namespace, "second") or {},
                                 "Admitted"),
              SECOND_READY_TIMEOUT_S, "second admitted by the new leader")
    state = objects.check_state(objects.workload_of(kind, namespace, "second"))
    assert state is not None and state[0] == "Ready" and "freed" in state[1], state
    kind.wait(lambda: [p["status"].get("phase") in ("Succeeded", "Failed")
                       for p in objects.pods_of(kind, namespace, "second")] == [True],
              JOB_TIMEOUT_S, "second's pod done")
    [first] = objects.pods_of(kind, namespace, "first")
    [second] = objects.pods_of(kind, namespace, "second")
    assert first["status"]["phase"] == "Succeeded", first["status"]
    assert second["status"]["phase"] == "Succeeded", second["status"]
    assert second["spec"]["nodeName"] == worker, second["spec"]["nodeName"]
    first_done = first["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    second_ran = second["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
    assert second_ran >= first_done, (first_done, second_ran)  # RFC 3339, both UTC
    seen = objects.device_env(kind.kubectl("logs", "-n", namespace,
                                           second["metadata"]["name"]).stdout)
    assert len(seen) == 4, f"second's container saw the worker's four GPUs: {seen}"
    return old, new


def _admitted_once(history: list[dict[str, Any]]) -> None:
    """Per Workload (uid), across every version the watch saw: never Evicted, and
    Admitted turned True at most once."""
    admitted: dict[str, set[str]] = {}
    for wl in history:
        uid = wl["metadata"]["uid"]
        for cond in (wl.get("status") or {}).get("conditions") or []:
            assert not (cond["type"] == "Evicted" and cond["status"] == "True"), \
                (wl["metadata"]["name"], cond)
            if cond["type"] == "Admitted" and cond["status"] == "True":
                admitted.setdefault(uid, set()).add(cond["lastTransitionTime"])
    assert len(admitted) == 2, f"first and second admitted: {admitted}"
    assert all(len(times) == 1 for times in admitted.values()), admitted


@pytest.mark.timeout(demo_kind.TIMEOUT_S + 120)
def test_the_kind_demo_runs_its_job(kind: cluster.KindCluster, namespace: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`make demo-kind`'s part after the cluster is up, on the module's cluster."""
    with diagnostics(kind):
        assert demo_kind.show(kind, namespace)
    out = capsys.readouterr().out
    for said in (f"{gating.GATED_BY}='{gating.GATE}'", "the gate is lifted",
                 "fitgate's check on the Workload: Ready", "admitted",
                 "Running on " + kind.workers()[0], "sees FITGATE_DEVICE_GPU_",
                 "sees FITGATE_DEVICE_NIC_", f"{demo_kind.PODS} of {demo_kind.PODS} pods"):
        assert said in out, f"the demo did not print {said!r}:\n{out}"
