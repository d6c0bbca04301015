"""What a failed e2e test prints, so that a CI failure can be understood without a rerun.

``report()`` gathers, each part bounded in time and size:

- the conditions of the Workloads (with their admission-check states), ProvisioningRequests
  and Pods in the test's namespace, and its latest Events;
- the end of every control-plane component's log (Kueue, cluster-autoscaler, the
  scheduler, ...), and of every local process the test started (``fitgate serve`` ...).

conftest's ``pytest_runtest_makereport`` hook attaches it to the failure report as a
section. It reads the API with the cluster's kubectl (synchronously: it runs inside a
pytest hook, after the test body and outside its timeout).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

from e2e import runner
from e2e.cluster.local import cluster

LOG_LINES = int(os.environ.get("FITGATE_E2E_LOG_LINES", "40"))
KUBECTL_TIMEOUT_S = 20
MAX_EVENTS = 25


def _kubectl(kubeconfig: pathlib.Path, kubectl: str, *args: str) -> Any:
    proc = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "--request-timeout=10s",
                           *args, "-o", "json"], capture_output=True, text=True,
                          timeout=KUBECTL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip()[:500])
    return json.loads(proc.stdout)


def _conditions(obj: dict[str, Any]) -> list[str]:
    out = []
    for c in (obj.get("status") or {}).get("conditions") or []:
        line = f"    {c.get('type')}={c.get('status')}"
        if c.get("reason"):
            line += f" reason={c['reason']}"
        if c.get("message"):
            line += f" message={c['message'][:300]!r}"
        out.append(line)
    return out or ["    (no conditions)"]


def _objects(kubeconfig: pathlib.Path, kubectl: str, namespace: str) -> list[str]:
    lines = [f"== objects in namespace {namespace}"]
    kinds = (("workloads.kueue.x-k8s.io", "Workload"),
             ("provisioningrequests.autoscaling.x-k8s.io", "ProvisioningRequest"),
             ("pods", "Pod"))
    for resource, kind in kinds:
        try:
            items = _kubectl(kubeconfig, kubectl, "get", resource, "-n", namespace)["items"]
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as err:
            lines.append(f"  {kind}: cannot list: {err}")
            continue
        if not items:
            lines.append(f"  {kind}: none")
        for obj in items:
            meta, status = obj["metadata"], obj.get("status") or {}
            head = f"  {kind} {meta['name']}"
            if kind == "Pod":
                head += (f" phase={status.get('phase')} "
                         f"node={(obj.get('spec') or {}).get('nodeName')}")
            if kind == "Workload":
                checks = {c["name"]: c.get("state") for c in status.get("admissionChecks") or []}
                if checks:
                    head += f" admissionChecks={checks}"
                gates = (meta.get("annotations") or {})
                gated = {k: v for k, v in gates.items() if "admission-gated" in k}
                if gated:
                    head += f" {gated}"
            lines.append(head)
            lines += _conditions(obj)
    try:
        events = _kubectl(kubeconfig, kubectl, "get", "events", "-n", namespace)["items"]
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as err:
        lines.append(f"  events: cannot list: {err}")
    else:
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        lines.append(f"== last {min(len(events), MAX_EVENTS)} of {len(events)} events")
        for e in events[-MAX_EVENTS:]:
            obj = e.get("involvedObject") or {}
            lines.append(f"  {e.get('type')} {obj.get('kind')}/{obj.get('name')} "
                         f"{e.get('reason')}: {(e.get('message') or '')[:300]}")
    return lines


def _tail(path: pathlib.Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"(cannot read: {err})"
    return "\n".join(text.splitlines()[-lines:])


def report(local: cluster.LocalCluster | None, kubeconfig: pathlib.Path | None,
           namespace: str | None, processes: Iterable[runner.LocalProcess] = (),
           lines: int = LOG_LINES) -> str:
    """The diagnostics text for a failed test (never raises for an unreachable API)."""
    out: list[str] = []
    kubectl = str(local.binaries.get("kubectl", "")) if local else (
        os.environ.get("FITGATE_E2E_KUBECTL") or shutil.which("kubectl") or "")
    if namespace and kubeconfig and kubectl:
        out += _objects(kubeconfig, kubectl, namespace)
    for proc in processes:
        state = "running" if proc.alive() else f"exited {proc.returncode}"
        out.append(f"== test process {proc.name} ({state}), last {lines} lines of "
                   f"{proc.log_path}")
        out.append(_tail(proc.log_path, lines))
    if local is not None:
        for comp in local.procs:
            state = ("stopped by the test" if comp.name in local.stopped
                     else "running" if comp.alive() else f"EXITED {comp.popen.returncode}")
            out.append(f"== {comp.name} ({state}), last {lines} lines of {comp.log_path}")
            out.append(_tail(comp.log_path, lines))
    return "\n".join(out)

