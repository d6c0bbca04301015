"""``make demo-kind``: one DRA Job through fitgate on the offline kind cluster, with real pods.

1. Builds (warm: reuses) the kind node image and fitgate's image (e2e/cluster/kind/README.md;
   a cold build takes about 50 minutes and prints its progress).
2. Creates a kind cluster: one control plane and one worker, on which the fake DRA kubelet
   plugin publishes four GPUs (two per PCIe root) and two NICs (one per root).
3. Installs the stack as ``e2e/tests/test_kind.py`` does: the driver, the ProvisioningRequest
   CRD, Kueue from its manifests, fitgate with ``helm install charts/fitgate``.
4. Submits a Job of two pods, each claiming two GPUs on one PCIe root and one NIC, to a
   LocalQueue whose ClusterQueue has fitgate's AdmissionCheck, and prints what happens: the
   gate fitgate's webhook put on the Job, the gate lifted, fitgate's check on the Workload as
   it changes, the Workload admitted, each pod Running on the worker with the devices its
   container sees (the driver's CDI variables), the Job complete.
5. Deletes the cluster, also on failure or Ctrl-C.

Exit status 0 when the Job completed and every pod's container saw its three devices.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import sys
import time
import uuid
from typing import Any

from admission.gate import predicates as gating
from e2e.cluster.kind import cluster, objects, stack

QUEUE = "demo"
JOB = "train"
PODS = 2
DEVICES_PER_POD = 3  # two GPUs on one PCIe root, one NIC
TIMEOUT_S = 600


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def show(kc: cluster.KindCluster, namespace: str, timeout: float = TIMEOUT_S) -> bool:
    """Submit the demo's Job in `namespace` and print what happens until it completes;
    True when it did and every container saw its devices."""
    objects.queues(kc, namespace, QUEUE)
    objects.apply(kc,
                  objects.claim_template("two-gpus", namespace, stack.GPU_CLASS, 2,
                                         objects.PCIE_ROOT),
                  objects.claim_template("one-nic", namespace, stack.NIC_CLASS, 1))
    job = objects.job(JOB, namespace, QUEUE, {"gpus": "two-gpus", "nic": "one-nic"},
                      f"env | grep ^{objects.ENV_PREFIX} | sort; sleep 15", pods=PODS)
    say(f"submitting Job {namespace}/{JOB}: {PODS} pods, each claiming 2 GPUs on one PCIe "
        f"root and 1 NIC, on LocalQueue {QUEUE} (fitgate's AdmissionCheck)")
    made = kc.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(job))
    for line in made.stderr.splitlines():
        say(f"kubectl: {line}")
    created = json.loads(made.stdout)  # as the API server stored it, after the webhooks
    say(f"the Job as created: {gating.GATED_BY}="
        f"{gating.annotations_of(created).get(gating.GATED_BY)!r} (fitgate's webhook)")
    return _follow(kc, namespace, time.monotonic() + timeout)


def _follow(kc: cluster.KindCluster, namespace: str, deadline: float) -> bool:
    """Print each change until the Job completes or fails, or `deadline` passes."""
    gated = True
    check: tuple[str, str] | None = None
    admitted = False
    phases: dict[str, str] = {}
    devices: dict[str, dict[str, str]] = {}
    while time.monotonic() < deadline:
        # The Workload first: a check seen on it implies the gate was lifted before, and
        # the Job, read after, shows that, so the two are printed in the order they came.
        wl = objects.workload_of(kc, namespace, JOB)
        job = objects.get(kc, "job", "-n", namespace, JOB)
        if gated and not gating.gated_by_us(job):
            gated = False
            say("the gate is lifted: the gang can fit, so Kueue may reserve quota")
        if (now := objects.check_state(wl)) is not None and now != check:
            check = now
            say(f"fitgate's check on the Workload: {now[0]}" + (f": {now[1]}" if now[1] else ""))
        if wl is not None and not admitted and objects.condition(wl, "Admitted"):
            admitted = True
            say(f"Workload {wl['metadata']['name']} admitted; Kueue unsuspends the Job")
        for pod in objects.pods_of(kc, namespace, JOB):
            _pod_changes(kc, namespace, pod, phases, devices)
        status = job.get("status") or {}
        if status.get("succeeded") == PODS or status.get("failed"):
            break
        time.sleep(1)
    else:
        say(f"the Job did not complete within the demo's {TIMEOUT_S} s")
        return False
    ok = status.get("succeeded") == PODS and len(devices) == PODS and all(
        len(d) == DEVICES_PER_POD for d in devices.values())
    say(f"Job {namespace}/{JOB}: {status.get('succeeded', 0)} of {PODS} pods succeeded"
        + ("" if ok else f"; failed: {status.get('failed', 0)}, devices seen: {devices}"))
    return ok


def _pod_changes(kc: cluster.KindCluster, namespace: str, pod: dict[str, Any],
                 phases: dict[str, str], devices: dict[str, dict[str, str]]) -> None:
    name = pod["metadata"]["name"]
    phase = str(pod["status"].get("phase"))
    if phases.get(name) != phase:
        phases[name] = phase
        node = pod["spec"].get("nodeName") or "(not bound)"
        say(f"pod {name}: {phase} on {node}")
    if phase in ("Running", "Succeeded") and name not in devices:
        logs = kc.kubectl("logs", "-n", namespace, name, check=False).stdout
        seen = objects.device_env(logs)
        if len(seen) == DEVICES_PER_POD:
            devices[name] = seen
            for var, claim in sorted(seen.items()):
                say(f"  {name} sees {var}={claim}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo_kind", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default=f"fitgate-demo-{uuid.uuid4().hex[:6]}",
                        help="the kind cluster's name (default: a fresh one)")
    parser.add_argument("--workdir", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent / ".run" / "demo-kind")
    args = parser.parse_args(argv)
    started = time.monotonic()
    say("the kind node image and fitgate's image (warm: reused; cold: about 50 minutes)")
    env = cluster.engine_env()
    node_image = cluster.build_node_image(env)
    image = stack.fitgate_image(env)
    kc = cluster.KindCluster(args.name, args.workdir / args.name, env, node_image)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        say(f"creating kind cluster {args.name} (one control plane, one worker)")
        kc.create()
        say("installing the fake DRA driver, the ProvisioningRequest CRD, Kueue, and "
            f"fitgate ({image}) with its Helm chart")
        stack.install(kc, image)
        namespace = f"demo-{uuid.uuid4().hex[:6]}"
        kc.kubectl("create", "namespace", namespace)
        ok = show(kc, namespace)
    except BaseException:
        if kc.kubeconfig.exists():
            pods = kc.kubectl("get", "pods", "-A", "-o", "wide", check=False)
            print(pods.stdout, pods.stderr, kc.node_logs(), sep="\n", file=sys.stderr)
        raise
    finally:
        say(f"deleting kind cluster {args.name}")
        kc.delete()
        signal.signal(signal.SIGTERM, previous)
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
