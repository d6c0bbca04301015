"""Containment of heavy selectors: the API server's cost limit and the runtime's budget."""

import pytest

from fitcore import cel, celcost

DEVICE = cel.device_input("gpu.example.com", {"index": 0}, {}, False)

TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
ALL = """
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
"""

# Expressions and their `expectCost` from the testcases of
# k8s.io/dynamic-resource-allocation/cel/compile_test.go (Kubernetes 1.36 line), for every
# row whose constructs fitcore declares (the list-type attribute rows need KEP-5491).
UPSTREAM_COSTS = [
    ('device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', 6),
    ('device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', 6),
    ('"no-such-domain" in device.attributes', 3),
    ('"dra.example.com" in device.attributes', 3),
    ('device.driver == ""', 2),
    ('device.driver == "dra.example.com"', 4),
    ('device.attributes["dra.example.com"].name', 4),
    ('device.attributes["dra.example.com"]["name"]', 4),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', 15),
    ('device.attributes["other.example.com"].name', 4),
    ('device.attributes["dra.example.com"].name > 0', 5),
    ('device.attributes["dra.example.com"].name == "fish"', 5),
    ('device.attributes["dra.example.com"].names', 4),
    ('device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))', 6),
    ('device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && '
     'isSemver("v1.0.0", true)', 7),
    ('device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 6),
    ('"name" in device.capacity["dra.example.com"] && '
     'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 10),
    ('!("name" in device.capacity["dra.example.com"]) || '
     'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 11),
    (ALL, 52),
    ('device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && '
     'device.attributes["dra.example.com"].c', 12),
    ('device.attributes.exists_one(x, x == "dra.example.com")', 164),
    ('device.attributes["dra.example.com"].exists_one(x, x == "services")', 133),
    ('device.attributes["dra.example.com"].services.split("example").size() >= 2', 19),
    ('device.attributes["dra.example.com"].services.matches("[^a]?sym")', 18),
    ('device.capacity.exists_one(x, x == "dra.example.com")', 164),
    ('device.capacity["dra.example.com"].exists_one(x, x == "memory")', 133),
    (f"{TEN}.all(x, {TEN}.all(y, {TEN}.all(z, {TEN}.all(z2, {TEN}.all(z3, {TEN}.all(z4, "
     f"{TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))", 85555551),
    ("device.allowMultipleAllocations == true", 3),
    ("device.allowMultipleAllocations == false", 3),
]


def estimate(expression):
    program = cel._environment().compile(expression)
    return celcost.estimate_max_cost(program.serialize(), cel._QUALIFIED)


@pytest.mark.parametrize(("expression", "expected"), UPSTREAM_COSTS)
def test_estimate_equals_upstream_expect_cost(expression, expected):
    assert estimate(expression) == expected


def test_over_the_limit_is_refused_at_compile_time_with_the_estimate():
    with pytest.raises(cel.CelError) as info:
        cel.compile_selector(UPSTREAM_COSTS[-3][0])
    assert info.value.kind == "compile"
    assert "too complex, exceeds cost limit" in info.value.message
    assert "85555551" in info.value.message


def doubling(levels):
    """`levels` nested binds, each doubling a string: 2**levels characters at the end."""
    body = f"x{levels}.size() > 0"
    for level in range(levels, 0, -1):
        body = f"cel.bind(x{level}, x{level - 1} + x{level - 1}, {body})"
    return f'cel.bind(x0, "ab", {body})'


def test_string_doubling_binds_are_refused_before_any_evaluation():
    # 27 levels took 3.5 s and 553 MiB in one evaluation before the limit was enforced.
    # The API server estimates 53,687,441 for it (bench/oracle mode "cost"), as we do.
    assert estimate(doubling(27)) == 53_687_441
    with pytest.raises(cel.CelError) as info:
        cel.compile_selector(doubling(27))
    assert info.value.kind == "compile"
    assert "too complex, exceeds cost limit" in info.value.message


def test_a_few_doubling_binds_stay_under_the_limit():
    assert estimate(doubling(3)) < cel.MAX_COST
    assert cel.compile_selector(doubling(3)).matches(DEVICE)


@pytest.mark.parametrize("expression", [
    'device.attributes["gpu.example.com"].model.lowerAscii().startsWith("h100")',
    'device.attributes.all(d, device.attributes[d].all(i, i.size() < 64))',
    '[1, 2, 3].map(x, x * 2).filter(y, y > 2).size() == 2',
    'device.attributes["gpu.example.com"].uuid.replace("-", "").size() == 32',
    '"a,b".split(",").size() == 2',
    '["a", "b"].join("-") == "a-b"',
    'device.attributes["gpu.example.com"].uuid.findAll("[0-9]+").size() > 1',
    'cel.bind(a, device.attributes["gpu.example.com"], a.index >= 0 && a.model != "")',
])
def test_ordinary_selectors_are_far_below_the_limit(expression):
    assert 0 < estimate(expression) < cel.MAX_COST // 100
    cel.compile_selector(expression)


# 12^4 = 20,736 comprehension iterations: above cel-cpp's iteration budget, far below
# Kubernetes' cost limit (the API server estimates 254,483 and accepts it).
LIST = "[" + ", ".join(str(i) for i in range(12)) + "]"
MANY_ITERATIONS = (f"{LIST}.all(a, {LIST}.all(b, {LIST}.all(c, {LIST}.all(d, "
                   "a + b + c + d >= 0))))")


def test_many_iterations_are_under_the_cost_limit():
    assert estimate(MANY_ITERATIONS) == 254_483


def test_iteration_budget_is_a_runtime_cel_error():
    selector = cel.compile_selector(MANY_ITERATIONS)
    with pytest.raises(cel.CelError) as info:
        selector.matches(DEVICE)
    assert info.value.kind == "runtime"
    assert "iteration budget" in info.value.message
    assert "10,000" in info.value.message
