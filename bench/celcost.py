"""What estimating a selector's worst-case cost adds to compiling it.

    .venv/bin/python -m bench.celcost [--repeat N]

For each selector: the binding's compile (type check) alone, `Expression.serialize()`
plus `fitcore.celcost.estimate_max_cost`, and the estimate itself, as the median
microseconds of N runs (compiled selectors are cached by expression in fitcore, so this is
paid once per distinct selector). Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

from fitcore import cel, celcost

SELECTORS = {
    "driver": 'device.driver == "gpu.nvidia.com"',
    "attribute": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-PCIE-40GB"',
    "quantity": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "bind+semver": ('cel.bind(g, device.attributes["gpu.nvidia.com"], g.type == "gpu" && '
                    'g.driverVersion.isGreaterThan(semver("550.0.0")) && '
                    'g.productName.lowerAscii().matches("a100|h100"))'),
    "comprehension": ('device.attributes.exists(d, device.attributes[d].exists(i, '
                      'i.startsWith("pcie")))'),
    "refused (7 nested all)": ("[1,2,3,4,5,6,7,8,9,10].all(a, " * 7 + "true" + ")" * 7),
}


def _median_us(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    repeat = parser.parse_args().repeat
    env = cel._environment()
    print(f"{'selector':<24} {'compile µs':>11} {'serialize+estimate µs':>22} "
          f"{'estimate µs':>12} {'overhead':>9} {'cost':>10}")
    for name, expression in SELECTORS.items():
        program = env.compile(expression)
        data = program.serialize()
        compile_us = _median_us(lambda e=expression: env.compile(e), repeat)
        both_us = _median_us(lambda p=program: celcost.estimate_max_cost(
            p.serialize(), cel._QUALIFIED), repeat)
        est_us = _median_us(lambda d=data: celcost.estimate_max_cost(d, cel._QUALIFIED),
                            repeat)
        cost = celcost.estimate_max_cost(data, cel._QUALIFIED)
        print(f"{name:<24} {compile_us:>11.1f} {both_us:>22.1f} {est_us:>12.1f} "
              f"{both_us / compile_us:>8.0%} {cost:>10}")


if __name__ == "__main__":
    main()
