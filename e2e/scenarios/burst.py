"""Where scenario 11's burst spends its time: a timeline per gang, and fitgate's share.

While the 200 gangs are decided, ``Recorder`` watches the namespace's Jobs, Workloads,
Pods and ProvisioningRequests and notes, per gang, the first moment (this process's
clock, sub-second) it saw each milestone the components write:

    submit      the test's create call for the Job starts
    created     the create call returned (the API server ran fitgate's and Kueue's
                webhooks on it)
    workload    Kueue's job controller created the gang's Workload (gated by fitgate)
    ungated     fitgate's gate removed its entry from the Job's admission-gated-by
                annotation (or, for a gang that can never fit, wrote its explanation)
    reserved    Kueue reserved quota (QuotaReserved)
    pending     fitgate's check is on the Workload, Pending, with quota reserved (Kueue's
                Workload controller adds the entry, often in a later write than the
                reservation): from here fitgate can act
    requested   fitgate created a ProvisioningRequest (gangs that need new nodes)
    provisioned the autoscaler marked it Provisioned
    ready       fitgate wrote its check Ready
    admitted    Kueue marked the Workload Admitted
    scheduled   every pod of the gang bound to a node (after "decided"; shown apart)

Consecutive milestones make the phases, each owned by one component:

    webhooks    submit → created         API server + the webhooks (fitgate's among them)
    workload    created → workload       Kueue (job controller)
    gate        workload → ungated       fitgate (the gate)
    quota       ungated → reserved       Kueue (copies the ungating, queues, reserves)
    entry       reserved → pending       Kueue (its Workload controller adds the checks)
    check       pending → ready          fitgate (the check; for a gang that needs new
                                         nodes only pending → requested and provisioned →
                                         ready, the wait for the new nodes and its verify)
    autoscaler  requested → provisioned  cluster-autoscaler
    admit       ready → admitted         Kueue

**fitgate's share** is the time gangs spent waiting on fitgate's controllers (gate and
check phases: from the moment fitgate could act, a Workload gated by it or a check
Pending, to the watch event of fitgate's write) over the time they spent from submit to
decided, summed over all gangs (gang-seconds). The webhook's own time is apart, from
fitgate's ``fitgate_webhook_review_seconds``. Its **CPU share** is the CPU seconds of the
fitgate process (and any children) over the burst's wall time (1.0 = one core busy the
whole burst); every other component's CPU seconds are printed next to it, from /proc.

A watch event arrives a few milliseconds after the write on an idle machine, more on a
loaded one; every phase carries that delay once, so the shares stay comparable.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import statistics
import time
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import parser

from e2e import builders, kube

MILESTONES = ("submit", "created", "workload", "ungated", "reserved", "pending", "requested",
              "provisioned", "ready", "admitted", "scheduled")
# (phase, component, from milestone, to milestone)
PHASES = (("webhooks", "API server + webhooks", "submit", "created"),
          ("workload", "Kueue", "created", "workload"),
          ("gate", "fitgate", "workload", "ungated"),
          ("quota", "Kueue", "ungated", "reserved"),
          ("entry", "Kueue", "reserved", "pending"),
          ("check", "fitgate", "pending", "requested"),
          ("autoscaler", "cluster-autoscaler", "requested", "provisioned"),
          ("check", "fitgate", "provisioned", "ready"),
          ("admit", "Kueue", "ready", "admitted"))
FITGATE_PHASES = ("gate", "check")
GATED_BY = "kueue.x-k8s.io/admission-gated-by"
GATE = "fitgate.io/topology-fit"
EXPLANATION = "fitgate.io/explanation"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
WATCH_SECONDS = 1800
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Gang:
    name: str
    pods: int
    times: dict[str, float] = dataclasses.field(default_factory=dict)
    explained: bool = False
    workload: str = ""
    uid: str = ""
    scheduled_pods: set[str] = dataclasses.field(default_factory=set)

    def mark(self, milestone: str, at: float) -> None:
        self.times.setdefault(milestone, at)

    @property
    def decided(self) -> float | None:
        return self.times.get("ungated" if self.explained else "admitted")

    def phases(self) -> dict[str, float]:
        """Seconds per phase; a missing milestone folds its phase into the next one seen."""
        out: dict[str, float] = {}
        end = "ungated" if self.explained else "admitted"
        last = "submit"
        for phase, _, _, stop in PHASES:
            if stop not in self.times or self.times[stop] < self.times[last]:
                continue
            out[phase] = out.get(phase, 0.0) + self.times[stop] - self.times[last]
            last = stop
            if stop == end:
                break
        return out


class Recorder:
    """Watches the namespace while the burst runs; the gangs' timelines."""

    def __init__(self, client: kube.Kube, namespace: str, check: str,
                 gangs: Iterable[tuple[str, int]]) -> None:
        self.client = client
        self.namespace = namespace
        self.check = check
        self.gangs = {name: Gang(name, pods) for name, pods in gangs}
        self._by_workload: dict[str, str] = {}
        self._by_uid: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._connected: list[asyncio.Event] = []
        self.errors: list[str] = []

    async def start(self, timeout: float = 30.0) -> None:
        """Open the watches; returns once each is connected."""
        for api_version, kind, handler in (
                ("batch/v1", "Job", self.on_job),
                (builders.KUEUE, "Workload", self.on_workload),
                ("v1", "Pod", self.on_pod),
                (builders.AUTOSCALING, "ProvisioningRequest", self.on_request)):
            connected = asyncio.Event()
            self._connected.append(connected)
            self._tasks.append(asyncio.create_task(
                self._watch(api_version, kind, handler, connected)))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._connected)), timeout)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _watch(self, api_version: str, kind: str, handler: Any,
                     connected: asyncio.Event) -> None:
        """Stream the kind's events (reconnecting from the last resourceVersion)."""
        version = ""
        while True:
            query = [("watch", "true"), ("timeoutSeconds", str(WATCH_SECONDS)),
                     ("allowWatchBookmarks", "true")]
            if version:
                query.append(("resourceVersion", version))
            try:
                resp = await self.client.api.call_api(
                    kube.path_for(api_version, kind, self.namespace), "GET",
                    query_params=query, header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"], _preload_content=False,
                    _request_timeout=WATCH_SECONDS + 30)
                connected.set()
                try:
                    async for line in resp.content:
                        at = time.time()
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            version = ""
                            break
                        version = str((obj.get("metadata") or {}).get("resourceVersion")
                                      or "")
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            handler(obj, at)
                finally:
                    resp.release()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken stream: note it, watch again
                self.errors.append(f"{kind} watch: {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    # -- milestones --------------------------------------------------------------------

    def submitted(self, name: str, started: float, returned: float) -> None:
        self.gangs[name].mark("submit", started)
        self.gangs[name].mark("created", returned)

    def on_job(self, job: Mapping[str, Any], at: float) -> None:
        gang = self.gangs.get(str(job["metadata"]["name"]))
        if gang is None:
            return
        annotations = job["metadata"].get("annotations") or {}
        if EXPLANATION in annotations:
            gang.explained = True
            gang.mark("ungated", at)
        elif GATE not in [g.strip() for g in str(annotations.get(GATED_BY, "")).split(",")]:
            gang.mark("ungated", at)

    def on_workload(self, wl: Mapping[str, Any], at: float) -> None:
        owners = [r.get("name") for r in wl["metadata"].get("ownerReferences") or []
                  if r.get("kind") == "Job"]
        gang = self.gangs.get(str(owners[0])) if owners else None
        if gang is None:
            return
        gang.workload, gang.uid = str(wl["metadata"]["name"]), str(wl["metadata"]["uid"])
        self._by_uid[gang.uid] = gang.name
        gang.mark("workload", at)
        reserved = kube.has_condition(dict(wl), "QuotaReserved")
        if reserved:
            gang.mark("reserved", at)
        for entry in (wl.get("status") or {}).get("admissionChecks") or []:
            if entry.get("name") != self.check:
                continue
            if reserved:
                gang.mark("pending", at)
            if entry.get("state") == "Ready":
                gang.mark("ready", at)
        if kube.has_condition(dict(wl), "Admitted"):
            gang.mark("admitted", at)

    def on_pod(self, pod: Mapping[str, Any], at: float) -> None:
        labels = pod["metadata"].get("labels") or {}
        job = next((labels[k] for k in JOB_NAME_LABELS if k in labels), None)
        gang = self.gangs.get(str(job))
        if gang is None or not kube.has_condition(dict(pod), "PodScheduled"):
            return
        gang.scheduled_pods.add(str(pod["metadata"]["name"]))
        if len(gang.scheduled_pods) >= gang.pods:
            gang.mark("scheduled", at)

    def on_request(self, pr: Mapping[str, Any], at: float) -> None:
        uid = (pr["metadata"].get("labels") or {}).get("fitgate.io/workload-uid", "")
        gang = self.gangs.get(self._by_uid.get(uid, ""))
        if gang is None:
            return
        gang.mark("requested", at)
        if kube.has_condition(dict(pr), "Provisioned"):
            gang.mark("provisioned", at)


# -- CPU and metrics --------------------------------------------------------------------


def cpu_seconds(pid: int, children: bool = True) -> float:
    """CPU seconds (user + system) of a process and (``children``) its live descendants
    (0: gone)."""
    total = 0.0
    for p in [pid, *(_descendants(pid) if children else ())]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    return total


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text endpoint ({} when it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
            text = resp.read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(text)
            for s in family.samples}


def _sum(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
         **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == w for k, w in labels.items()))


@dataclasses.dataclass
class Meter:
    """CPU seconds of named processes, fitgate's metrics and the load, over the burst."""

    pids: dict[str, int]
    metrics_url: str
    alone: frozenset[str] = frozenset()  # names counted without their descendants
    started: float = 0.0
    cpu0: dict[str, float] = dataclasses.field(default_factory=dict)
    metrics0: dict[Any, float] = dataclasses.field(default_factory=dict)
    wall: float = 0.0
    cpu: dict[str, float] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def begin(self) -> None:
        self.started = time.time()
        self.cpu0 = {n: cpu_seconds(p, n not in self.alone) for n, p in self.pids.items()}
        self.metrics0 = scrape(self.metrics_url)

    def end(self) -> None:
        self.wall = time.time() - self.started
        self.cpu = {n: cpu_seconds(p, n not in self.alone) - self.cpu0.get(n, 0.0)
                    for n, p in self.pids.items()}
        after = scrape(self.metrics_url)
        self.load = os.getloadavg()

        def delta(name: str, **labels: str) -> float:
            return _sum(after, name, **labels) - _sum(self.metrics0, name, **labels)
        m = self.metrics
        for ctl in ("gate", "workload"):
            m[f"reconciles {ctl}"] = delta("fitgate_reconcile_seconds_count", controller=ctl)
            m[f"reconcile s {ctl}"] = delta("fitgate_reconcile_seconds_sum", controller=ctl)
            m[f"queue wait s {ctl}"] = delta("fitgate_workqueue_wait_seconds_sum",
                                             controller=ctl)
            m[f"queue waits {ctl}"] = delta("fitgate_workqueue_wait_seconds_count",
                                            controller=ctl)
            m[f"errors {ctl}"] = delta("fitgate_reconcile_total", controller=ctl,
                                       result="error")
        m["decisions"] = delta("fitgate_decision_seconds_count")
        m["decision s"] = delta("fitgate_decision_seconds_sum")
        m["reviews"] = delta("fitgate_webhook_review_seconds_count")
        m["review s"] = delta("fitgate_webhook_review_seconds_sum")
        m["process cpu s"] = delta("process_cpu_seconds_total")
        m["promise waits"] = delta("fitgate_promise_waits_total")


# -- the breakdown ----------------------------------------------------------------------


@dataclasses.dataclass
class Breakdown:
    gangs: list[Gang]
    meter: Meter
    started: float
    errors: list[str] = dataclasses.field(default_factory=list)  # the watches' (Recorder)

    def decided(self) -> list[Gang]:
        return [g for g in self.gangs if g.decided is not None and "submit" in g.times]

    def incomplete(self) -> list[str]:
        """Gangs whose timeline misses a milestone every decided gang has."""
        need = ("submit", "created", "workload", "ungated")
        return [f"{g.name}: {sorted(g.times)}" for g in self.gangs
                if g.decided is None or any(m not in g.times for m in need)
                or (not g.explained
                    and any(m not in g.times for m in ("reserved", "pending", "ready")))]

    def phase_seconds(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {p[0]: [] for p in PHASES}
        for g in self.decided():
            for phase, s in g.phases().items():
                out[phase].append(s)
        return out

    def gang_seconds(self) -> float:
        return sum((g.decided or 0.0) - g.times["submit"] for g in self.decided())

    def fitgate_share(self) -> float | None:
        total = self.gang_seconds()
        if not total:
            return None
        spent = self.phase_seconds()
        return sum(sum(spent[p]) for p in FITGATE_PHASES) / total

    def cpu_share(self) -> float | None:
        m = self.meter
        return m.cpu.get("fitgate", 0.0) / m.wall if m.wall else None

    def write(self, path: pathlib.Path) -> None:
        """Every gang's milestones (seconds after the first submit) and phases, the CPU
        seconds and fitgate's metric deltas, as JSON."""
        path.write_text(json.dumps({
            "wall": self.meter.wall, "load": self.meter.load, "cpu": self.meter.cpu,
            "metrics": self.meter.metrics,
            "gangs": {g.name: {"explained": g.explained, "phases": g.phases(),
                               "times": {m: round(t - self.started, 3)
                                         for m, t in sorted(g.times.items(),
                                                            key=lambda x: x[1])}}
                      for g in self.gangs}}, indent=1))

    def lines(self) -> list[str]:
        """The breakdown as text: phases, stage completion, CPU, fitgate's metrics."""
        total = self.gang_seconds()
        out = [f"burst breakdown: {len(self.decided())} of {len(self.gangs)} gangs decided, "
               f"{total:.0f} gang-seconds from submit to decided, wall "
               f"{self.meter.wall:.1f} s, load {'/'.join(f'{x:.1f}' for x in self.meter.load)}"]
        out.append(f"  {'phase':<11}{'owner':<24}{'gangs':>6}{'sum s':>9}{'share':>7}"
                   f"{'p50 s':>8}{'p90 s':>8}{'max s':>8}")
        owners = {p[0]: p[1] for p in PHASES}
        for phase, values in self.phase_seconds().items():
            if not values:
                continue
            q = _quantiles(values)
            out.append(f"  {phase:<11}{owners[phase]:<24}{len(values):>6}{sum(values):>9.1f}"
                       f"{sum(values) / total if total else 0:>7.1%}{q[0]:>8.2f}{q[1]:>8.2f}"
                       f"{max(values):>8.2f}")
        last = {m: max((g.times[m] for g in self.gangs if m in g.times), default=None)
                for m in MILESTONES}
        out.append("  last gang at each milestone (s after the first submit): " + ", ".join(
            f"{m} {t - self.started:.1f}" for m, t in last.items() if t is not None))
        if self.errors:
            out.append(f"  watch errors ({len(self.errors)}; milestones after them may be "
                       f"late): " + "; ".join(self.errors[:3]))
        share, cpu = self.fitgate_share(), self.cpu_share()
        out.append(f"  fitgate's share of gang-seconds (gate + check): "
                   f"{_pct(share)}; fitgate CPU over the wall: {_pct(cpu)} of one core")
        spent = sum(self.meter.cpu.values())
        out.append(f"  CPU seconds during the burst ({spent:.0f} in all, "
                   f"{spent / self.meter.wall if self.meter.wall else 0:.2f} cores busy): "
                   + ", ".join(f"{n} {s:.1f}" for n, s in
                               sorted(self.meter.cpu.items(), key=lambda x: -x[1])))
        m = self.meter.metrics
        if m:
            parts = []
            for ctl in ("gate", "workload"):
                n = m[f"reconciles {ctl}"]
                waits = m[f"queue waits {ctl}"]
                parts.append(
                    f"{ctl}: {n:.0f} reconciles, {m[f'reconcile s {ctl}']:.1f} s in them"
                    f" (mean {m[f'reconcile s {ctl}'] / n * 1000 if n else 0:.0f} ms), "
                    f"queue wait mean {m[f'queue wait s {ctl}'] / waits * 1000 if waits else 0:.0f}"
                    f" ms, {m[f'errors {ctl}']:.0f} errors")
            parts.append(f"{m['decisions']:.0f} engine decisions, {m['decision s']:.1f} s")
            parts.append(f"{m['reviews']:.0f} webhook reviews, {m['review s']:.1f} s")
            parts.append(f"{m.get('promise waits', 0):.0f} check passes waited for nodes "
                         "promised to gangs not bound yet")
            parts.append(f"process CPU {m['process cpu s']:.1f} s")
            out.append("  fitgate /metrics: " + "; ".join(parts))
        return out

    def note(self) -> str:
        """The row's short form: fitgate's share and the biggest phase."""
        spent = {p: sum(v) for p, v in self.phase_seconds().items() if v}
        total = self.gang_seconds()
        top = sorted(spent.items(), key=lambda x: -x[1])[:3]
        return (f"fitgate's share {_pct(self.fitgate_share())} of gang-seconds, CPU "
                f"{_pct(self.cpu_share())} of a core; biggest phases: " + ", ".join(
                    f"{p} {s / total:.0%}" for p, s in top) if total else "no gang decided")


def _quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=10)
    return statistics.median(values), cuts[8]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


@contextlib.asynccontextmanager
async def recording(client: kube.Kube, namespace: str, check: str,
                    gangs: Iterable[tuple[str, int]]) -> Any:
    rec = Recorder(client, namespace, check, gangs)
    await rec.start()
    try:
        yield rec
    finally:
        await rec.stop()
