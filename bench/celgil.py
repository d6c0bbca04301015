"""Does a CEL evaluation hold the GIL? Prints how often the main thread gets to run while
another thread evaluates selectors (`python -m bench.celgil`; figures, not assertions).

The main thread sleeps 1 ms in a loop and records the longest gap between its wake-ups
while a worker thread runs:

- 50 evaluations of a selector of 9,801 comprehension iterations (just under cel-cpp's
  budget of about 10,000 per evaluation, so the longest one evaluation can be);
- a pure-Python loop, for reference (the interpreter switches threads every 5 ms);
- Python's `re` on a catastrophic pattern, for reference (what fitgate used before RE2:
  it holds the GIL for the whole match).

Few wake-ups over a long run mean the worker held the GIL; a worst gap near one
evaluation's time means it is held per evaluation and released between them.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from fitcore import cel

LIST = "[" + ", ".join(str(i) for i in range(99)) + "]"
HEAVY = f"{LIST}.all(a, {LIST}.all(b, a + b >= 0))"  # 99 * 99 = 9,801 iterations
DEVICE = cel.device_input("gpu.example.com", {}, {}, False)


def gaps(work: Callable[[], object]) -> tuple[float, int, float]:
    """(worst main-thread gap, wake-ups, duration) while `work` runs in a thread."""
    thread = threading.Thread(target=work)
    started = last = time.perf_counter()
    worst, ticks = 0.0, 0
    thread.start()
    while thread.is_alive():
        time.sleep(0.001)
        now = time.perf_counter()
        worst, last, ticks = max(worst, now - last), now, ticks + 1
    thread.join()
    return worst, ticks, time.perf_counter() - started


def main() -> None:
    selector = cel.compile_selector(HEAVY)
    t0 = time.perf_counter()
    assert selector.matches(DEVICE)
    print(f"one evaluation of 9,801 iterations: {(time.perf_counter() - t0) * 1e3:.1f} ms")

    def evaluations() -> None:
        for _ in range(50):
            selector.matches(DEVICE)

    def python_loop() -> None:
        total = 0
        for i in range(20_000_000):
            total += i

    catastrophic = re.compile(r"^(a+)+$")
    for what, work in (("cel-cpp, 50 evaluations", evaluations),
                       ("pure Python loop (reference)", python_loop),
                       ("Python re, catastrophic pattern (reference)",
                        lambda: catastrophic.match("a" * 25 + "!"))):
        worst, ticks, took = gaps(work)
        print(f"{what}: {took * 1e3:.0f} ms, {ticks} main-thread wake-ups, "
              f"worst gap {worst * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
