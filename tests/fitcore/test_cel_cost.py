"""Containment of heavy selectors: the API server's cost limit and the runtime's budget."""

import pytest

from fitcore import cel

DEVICE = cel.device_input("gpu.example.com", {"index": 0}, {}, False)

# 12^4 = 20,736 comprehension iterations: above cel-cpp's iteration budget, far below
# Kubernetes' cost limit (Kubernetes accepts and evaluates it).
LIST = "[" + ", ".join(str(i) for i in range(12)) + "]"
MANY_ITERATIONS = (f"{LIST}.all(a, {LIST}.all(b, {LIST}.all(c, {LIST}.all(d, "
                   "a + b + c + d >= 0))))")


def test_iteration_budget_is_a_runtime_cel_error():
    selector = cel.compile_selector(MANY_ITERATIONS)
    with pytest.raises(cel.CelError) as info:
        selector.matches(DEVICE)
    assert info.value.kind == "runtime"
    assert "iteration budget" in info.value.message
    assert "10,000" in info.value.message
