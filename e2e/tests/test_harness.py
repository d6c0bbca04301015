"""The harness's promises to the scenario tests: credentials, local processes, faults,
cleanup between tests and failure diagnostics, against the real local cluster."""

from __future__ import annotations

import os
import pathlib
import socket
import ssl
import subprocess
import sys
from typing import Any

import pytest
import yaml

from e2e import builders, diagnostics, harness, kube
from e2e.cluster.local import cluster, processes

pytestmark = [pytest.mark.e2e]


def _kubectl(local: cluster.LocalCluster, kubeconfig: str, *args: str
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(local.binaries["kubectl"]), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.timeout(120)
async def test_token_for_acts_with_the_service_accounts_rights_only(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    ns = e2e.namespace
    await e2e.kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "fitgate", "namespace": ns}})
    await e2e.kube.create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-configmaps", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
    await e2e.kube.create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "fitgate-reads", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "read-configmaps"},
        "subjects": [{"kind": "ServiceAccount", "name": "fitgate", "namespace": ns}]})
    creds = local_cluster.token_for("fitgate", ns)
    config = yaml.safe_load(creds.kubeconfig.read_text())
    assert config["users"][0]["user"] == {"token": creds.token}  # no client certificate

    who = _kubectl(local_cluster, str(creds.kubeconfig), "auth", "whoami", "-o", "json")
    assert who.returncode == 0, who.stderr
    assert f"system:serviceaccount:{ns}:fitgate" in who.stdout
    allowed = _kubectl(local_cluster, str(creds.kubeconfig), "get", "configmaps")
    assert allowed.returncode == 0, allowed.stderr
    denied = _kubectl(local_cluster, str(creds.kubeconfig), "get", "nodes")
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()


def test_free_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    # Below the range, no outgoing connection's source port can take one before its
    # component binds it.
    low, high = processes.ephemeral_range()
    assert 1024 < low < high
    ports = [processes.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(10000 <= p < low for p in ports), ports


@pytest.mark.timeout(120)
async def test_local_process_is_started_restarted_and_stopped_with_its_log(
        e2e: harness.Harness) -> None:
    port = processes.free_port()
    argv = [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    proc = await e2e.start_process("web", argv, ready_url=f"http://127.0.0.1:{port}/")
    first = proc.pid
    assert proc.alive() and first is not None
    await proc.restart()
    assert proc.alive() and proc.pid != first and proc.starts == 2
    assert proc.log_text().count(f"port {port}") == 2, proc.log_text()
    assert await proc.stop() is not None
    assert not proc.alive()
    assert not processes.probe(f"http://127.0.0.1:{port}/")


@pytest.mark.timeout(120)
async def test_local_process_that_dies_fails_fast_with_its_log(e2e: harness.Harness) -> None:
    argv = [sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(3)"]
    port = processes.free_port()
    with pytest.raises(RuntimeError, match="bad flag --nope"):
        await e2e.start_process("broken", argv, ready_url=f"http://127.0.0.1:{port}/",
                                timeout=30)


@pytest.mark.timeout(180)
async def test_apiserver_restart_keeps_the_data(e2e: harness.Harness,
                                                local_cluster: cluster.LocalCluster) -> None:
    await e2e.kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "survivor", "namespace": e2e.namespace},
                           "data": {"k": "v"}})
    old_pid = local_cluster.process("kube-apiserver").popen.pid
    local_cluster.restart_apiserver()
    assert local_cluster.process("kube-apiserver").popen.pid != old_pid

    async def read_back() -> dict[str, Any] | None:
        return await e2e.kube.get("v1", "ConfigMap", "survivor", e2e.namespace)
    cm = await e2e.wait_for(read_back, 60, "the ConfigMap read back after the restart")
    assert cm["data"] == {"k": "v"}


@pytest.mark.timeout(300)
async def test_autoscaler_stop_start_and_node_groups_reset_after_a_test(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    group = harness.GPU_NODE_GROUP
    selector = f"{cluster.NODEGROUP_LABEL}={group.name}"
    assert await e2e.kube.list("v1", "Node", label_selector=selector) == [], \
        "an earlier test left autoscaled nodes behind"
    local_cluster.stop_autoscaler()
    assert not local_cluster.process("cluster-autoscaler").alive()
    local_cluster.check_alive()  # stopped on purpose is not a crash

    spec = builders.pod_spec(cpu="20", node_selector={cluster.NODEGROUP_LABEL: group.name})
    await e2e.kube.create(builders.pod_template("gang", e2e.namespace, spec))
    await e2e.kube.create(builders.provisioning_request("gang", e2e.namespace, "gang", 2))
    pr = await e2e.kube.get(builders.AUTOSCALING, "ProvisioningRequest", "gang",
                            e2e.namespace)
    assert not kube.has_condition(pr, "Provisioned")
    local_cluster.start_autoscaler()

    async def provisioned() -> bool:
        got = await e2e.kube.get(builders.AUTOSCALING, "ProvisioningRequest", "gang",
                                 e2e.namespace)
        return kube.has_condition(got, "Provisioned")
    await e2e.wait_for(provisioned, 120, "the restarted autoscaler provisions the request")

    async def grown() -> list[dict[str, Any]] | None:
        nodes = await e2e.kube.list("v1", "Node", label_selector=selector)
        return nodes if len(nodes) == 2 else None
    await e2e.wait_for(grown, 60, "two nodes in the group")

    # What the fixture does after every test, here under test.
    await e2e.kube.delete(builders.AUTOSCALING, "ProvisioningRequest", "gang", e2e.namespace)
    await e2e.reset_node_groups()
    assert await e2e.kube.list("v1", "Node", label_selector=selector) == []
    status = local_cluster.autoscaler_status()
    assert status is not None
    health = {g["name"]: g["health"] for g in status["nodeGroups"]}[group.name]
    assert health["cloudProviderTarget"] == health["minSize"] == 0


@pytest.mark.timeout(60)
async def test_kueue_metrics_certificate_is_this_clusters(
        local_cluster: cluster.LocalCluster) -> None:
    # Served from the cluster's own overlay of /etc: the handshake verifies only against
    # this cluster's CA, so a second cluster on the host cannot have replaced it.
    ctx = ssl.create_default_context(cafile=str(local_cluster.ca.ca.cert))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", local_cluster.ports.kueue_metrics),
                                  timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        cert: Any = tls.getpeercert()
    subject = {key: value for rdn in cert["subject"] for key, value in rdn}
    assert subject["commonName"] == "kueue-webhook"
    upper = local_cluster.workdir / "kueue-etc" / "upper" / cluster.KUEUE_METRICS_CERT_PATH
    assert (upper / "tls.crt").read_bytes() == local_cluster.kueue_cert.cert.read_bytes()


@pytest.mark.timeout(180)
async def test_kueue_reconfigured_with_wait_for_pods_ready(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    try:
        local_cluster.configure_kueue(waitForPodsReady={"timeout": "5m"})
        config = yaml.safe_load((local_cluster.workdir / "kueue-config.yaml").read_text())
        assert config["waitForPodsReady"] == {"timeout": "5m"}
        log = local_cluster.process("kueue").log_tail(10_000)
        assert "waitForPodsReady" in log, log[-3000:]  # Kueue logs the config it loaded
        await e2e.create_node_pool("ready", 1, builders.gpu_devices(1))
        queue = await e2e.create_queues(f"cq-{e2e.namespace}")
        await e2e.create_job("gated", queue)

        async def admitted() -> bool:
            return kube.has_condition(await e2e.workload_of_job("gated"), "Admitted")
        await e2e.wait_for(admitted, 60, "a Job admitted by the reconfigured Kueue")
    finally:
        local_cluster.configure_kueue(waitForPodsReady=None)
    config = yaml.safe_load((local_cluster.workdir / "kueue-config.yaml").read_text())
    assert "waitForPodsReady" not in config


@pytest.mark.timeout(120)
async def test_failure_diagnostics_show_workload_conditions_and_logs(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster) -> None:
    await e2e.create_node_pool("diag", 1, builders.gpu_devices(1))  # no autoscaling
    queue = await e2e.create_queues(f"cq-{e2e.namespace}")
    await e2e.create_job("seen", queue)

    async def admitted() -> bool:
        return kube.has_condition(await e2e.workload_of_job("seen"), "Admitted")
    await e2e.wait_for(admitted, 60, "the Job admitted")
    wl = await e2e.workload_of_job("seen")
    assert wl is not None
    text = diagnostics.report(local_cluster, local_cluster.kubeconfig, e2e.namespace,
                              e2e.processes)
    assert f"Workload {wl['metadata']['name']}" in text
    assert "Admitted=True" in text
    assert "ProvisioningRequest: none" in text
    assert "== kueue (running)" in text and "== cluster-autoscaler (running)" in text


@pytest.mark.timeout(120)
async def test_helm_v4_lints_renders_installs_and_uninstalls_a_chart(
        e2e: harness.Harness, local_cluster: cluster.LocalCluster,
        tmp_path: pathlib.Path) -> None:
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: probe\nversion: 0.1.0\ndescription: harness probe\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n")
    helm = str(local_cluster.binaries["helm"])
    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig),
           "HELM_CACHE_HOME": str(tmp_path / "cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "config"),
           "HELM_DATA_HOME": str(tmp_path / "data")}

    def run(*args: str) -> str:
        proc = subprocess.run([helm, *args], capture_output=True, text=True, env=env,
                              timeout=90, check=False)
        assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    assert run("version", "--short").startswith("v4.3.2")
    run("lint", str(chart))
    rendered = yaml.safe_load(run("template", "r1", str(chart), "--set", "greeting=hi"))
    assert rendered["data"] == {"greeting": "hi"}
    run("install", "r1", str(chart), "-n", e2e.namespace, "--wait", "--timeout", "60s")
    cm = await e2e.kube.get("v1", "ConfigMap", "r1-cm", e2e.namespace)
    assert cm is not None and cm["data"] == {"greeting": "hello"}
    run("uninstall", "r1", "-n", e2e.namespace, "--wait", "--timeout", "60s")
    assert await e2e.kube.get("v1", "ConfigMap", "r1-cm", e2e.namespace) is None
