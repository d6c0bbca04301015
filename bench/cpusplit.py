"""Where a burst's CPU went, by part: `bench.controller --profile`'s split.

Each thread's CPU over the burst is exact (`bench.controller.cpu_by_thread`, from
/proc); within a thread, the sampling profiler's stacks (`bench.controller.Sampler`)
say which part it was in, and the thread's CPU is divided in those proportions. The
parts:

- engine decisions: the gate's and the check's questions to fitcore, on their decision
  threads (the live engine's `fitgate-decide`, the idle engine's `fitgate-gate-engine`
  and `fitgate-idle-question`);
- engine event application: the decision thread applying the store events queued for
  the engine (`ClusterInventory._drain`: parsing, the per-node index);
- hand-off: a decision thread waking the loop with its result (`runtime/handoff.py`),
  but for the wait that follows;
- reconcilers, by controller (check, gate, release, others): their own Python on the
  loop (reading the stores and the ledger, building statuses, messages, requests,
  Events), calls into the API client excepted;
- event application on the loop: the informers' watch loops (compacting objects, the
  stores, their subscribers: indexes, the engine's queue, the controllers' keys);
- the fake API server and the bench (not fitgate's in production): the fake client's
  copies, watches and uids, the bench's Kueue and scheduler, the feeder, the ticker;
- the loop's own work (wake-ups, scheduling) and garbage collections (the collector
  runs on whichever thread allocates; its time shows on the bench's collector callback).

Samples are taken every 5 ms while a thread is not waiting in a lock, a queue or select;
a thread waiting for the GIL counts as busy where it waits, so the proportions are
approximate, the thread totals are not. Two places are nearly all such waiting, not
work: a decision thread that has just written the loop's wake-up byte
(`_write_to_self`) and the loop that has just read it (`_read_from_self`), each then
waiting to take the GIL back. Their samples are left out of the division (`WAITS`
counts them), so the CPU is divided among the parts that work.
"""

from __future__ import annotations

from collections.abc import Mapping

DECISION_THREADS = ("fitgate-decide", "fitgate-gate-engine", "fitgate-idle-question")

#: The innermost frames of a thread waiting for the GIL after a wake-up (see above).
WAITS = ("asyncio/selector_events.py:_write_to_self", "asyncio/selector_events.py:_read_from_self")

PARTS = ("engine decisions", "engine event application", "hand-off to the loop",
         "check reconciler", "gate reconciler", "release reconciler", "other controllers",
         "event application on the loop", "fake API server and bench",
         "loop wake-ups and scheduling", "garbage collection")


def part(stack: tuple[str, ...]) -> str | None:
    """The part one sampled stack (thread name first, outermost frame next) is in;
    "waiting" (for the GIL after a wake-up); None: a thread the split leaves out (the
    profiler's own)."""
    thread = stack[0].removeprefix("thread:").rsplit("_", 1)[0]
    frames = stack[1:]
    if frames and frames[-1] in WAITS:
        return "waiting"
    if frames and frames[-1].startswith("bench/loopwatch.py:_gc"):
        return "garbage collection"
    if thread in DECISION_THREADS:
        if any(":_drain" in f for f in frames):
            return "engine event application"
        if any(f.startswith("runtime/handoff.py:post") for f in frames):
            return "hand-off to the loop"
        return "engine decisions"
    if thread != "MainThread":
        return None
    start = next((i for i, f in enumerate(frames) if f.endswith("events.py:_run")), None)
    if start is None:
        return "loop wake-ups and scheduling"
    inner = frames[start + 1:]
    if any(f.startswith(("kube/fake.py:", "bench/controller.py:")) for f in inner):
        return "fake API server and bench"
    if any(f.startswith("kube/cache.py:") for f in inner):
        return "event application on the loop"
    if any(f.startswith("runtime/workqueue.py:_one") for f in inner):
        for f in inner:
            if f.startswith("check/workload.py:reconcile"):
                return "check reconciler"
            if f.startswith("gate/reconciler.py:reconcile"):
                return "gate reconciler"
            if f.startswith("release/reconciler.py:reconcile"):
                return "release reconciler"
        return "other controllers"
    return "loop wake-ups and scheduling"


def split(stacks: Mapping[tuple[str, ...], int], threads_cpu: Mapping[str, float]
          ) -> dict[str, float]:
    """CPU seconds by part: each thread's CPU (`threads_cpu`, by thread name as
    `cpu_by_thread` gives it: "event loop" for the main thread) divided as its samples
    (those waiting left out)."""
    samples: dict[str, dict[str, int]] = {}
    for stack, n in stacks.items():
        got = part(stack)
        if got is None:
            continue
        thread = stack[0].removeprefix("thread:").rsplit("_", 1)[0]
        thread = "event loop" if thread == "MainThread" else thread
        per = samples.setdefault(thread, {})
        per[got] = per.get(got, 0) + n
    out = {p: 0.0 for p in PARTS}
    for thread, per in samples.items():
        total = sum(n for p, n in per.items() if p != "waiting")
        for p, n in per.items():
            if p != "waiting":
                out[p] += threads_cpu.get(thread, 0.0) * n / total
    return out


def waiting(stacks: Mapping[tuple[str, ...], int]) -> float:
    """The share of the samples (every thread but the profiler's) that were waits after
    a wake-up (`WAITS`)."""
    counted = [(part(s), n) for s, n in stacks.items()]
    total = sum(n for p, n in counted if p is not None)
    return sum(n for p, n in counted if p == "waiting") / max(total, 1)
