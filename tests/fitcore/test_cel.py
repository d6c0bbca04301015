"""DRA CEL selectors: the Kubernetes environment, its libraries, and its errors."""

import pickle

import pytest

from fitcore import cel, values

Q = values.Quantity.parse
V = values.Version.parse

GPU = "gpu.example.com"
NVIDIA = "gpu.nvidia.com"


def example_gpu(**extra_attributes):
    """A dra-example-driver GPU: bare attribute names belong to gpu.example.com."""
    attributes = {"index": 0, "uuid": "gpu-18db0e85-99e9-c746-8531-ffeb86328b39",
                  "model": "LATEST-GPU-MODEL", "driverVersion": V("1.0.0"),
                  "resource.kubernetes.io/pcieRoot": "pci0000:64", **extra_attributes}
    return cel.device_input(GPU, attributes, {"memory": Q("80Gi"), "compute": Q("100")}, False)


def nvidia_a100():
    """The NVIDIA driver's documented A100 device, with fully qualified names mixed in."""
    return cel.device_input(
        NVIDIA,
        {"type": "gpu", "uuid": "GPU-2fa81118-5a5f-aa66-7660-471eed407181",
         "productName": "NVIDIA A100-PCIE-40GB", "architecture": "Ampere",
         "gpu.nvidia.com/cudaComputeCapability": V("8.0.0"),
         "driverVersion": V("580.126.20"), "brand": "Nvidia",
         "resource.kubernetes.io/pciBusID": "0000:65:00.0",
         "resource.kubernetes.io/pcieRoot": "pci0000:64"},
        {"memory": Q("40Gi")}, False)


def mig_device():
    return cel.device_input(NVIDIA, {"type": "mig", "profile": "1g.5gb",
                                     "parentUUID": "GPU-2fa81118"},
                            {"memory": Q("4864Mi"), "multiprocessors": Q("14")}, True)


def matches(expression, device=None):
    return cel.compile_selector(expression).matches(device or example_gpu())


def case(expression, expected, id_=None):
    return pytest.param(expression, expected, id=id_ or expression)


# -- the device variable ---------------------------------------------------------------

DEVICE = [
    case('device.driver == "gpu.example.com"', True, "driver"),
    case('device.attributes["gpu.example.com"].model == "LATEST-GPU-MODEL"', True, "bare-name"),
    case('device.attributes["gpu.example.com"].index == 0', True, "int-attribute"),
    case('device.attributes["gpu.example.com"].index == 0.0', True, "int-vs-double"),
    case('device.attributes["gpu.example.com"].index < 1u', True, "int-vs-uint"),
    case('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:64"', True,
         "qualified-name"),
    case('"pcieRoot" in device.attributes["resource.kubernetes.io"]', True, "in-inner-map"),
    case('device.attributes["gpu.example.com"].size() == 4', True, "domain-grouping"),
    case('device.capacity["gpu.example.com"].compute == quantity("100")', True, "capacity"),
    case("device.allowMultipleAllocations", False, "allow-multiple"),
    case('has(device.attributes["gpu.example.com"].model)', True, "has-present"),
    case('has(device.attributes["gpu.example.com"].serial)', False, "has-absent"),
    case('device.attributes["gpu.example.com"].?serial.orValue("none") == "none"', True,
         "optional-field"),
    case('device.attributes["gpu.example.com"].model == 1', False, "heterogeneous-equality"),
    case('device.attributes.exists(d, d == "resource.kubernetes.io")', True, "map-macro"),
]


@pytest.mark.parametrize(("expression", "expected"), DEVICE)
def test_device_variable(expression, expected):
    assert matches(expression) is expected


def test_allow_multiple_allocations_true():
    assert matches("device.allowMultipleAllocations", mig_device())


UNKNOWN_DOMAIN = [
    case('device.attributes["unknown.domain"].size() == 0', True, "attributes-empty"),
    case('device.capacity["unknown.domain"].size() == 0', True, "capacity-empty"),
    case('!has(device.attributes["unknown.domain"].x)', True, "has-in-empty"),
    case('"x" in device.attributes["unknown.domain"]', False, "in-empty"),
    case('device.attributes["a.com"].size() + device.capacity["b.com"].size() == 0', True,
         "two-unknown-domains"),
    case('device.driver != "gpu.nvidia.com" || device.attributes["gpu.nvidia.com"].type == "gpu"',
         True, "guarded-by-driver"),
    case('cel.bind(d, device.attributes["unknown.domain"], d.size() == 0)', True, "bound"),
    case('device.attributes["gpu.example.com"].size() == 4 && '
         'device.attributes["unknown"].size() == 0', True, "bare-word-domain"),
]


@pytest.mark.parametrize(("expression", "expected"), UNKNOWN_DOMAIN)
def test_unknown_domain_is_empty_map(expression, expected):
    assert matches(expression) is expected


def test_unknown_domain_does_not_leak_into_other_selectors():
    device = example_gpu()
    assert matches('device.attributes["unknown.domain"].size() == 0', device)
    assert matches("device.attributes.size() == 2", device)
    assert matches('!("unknown.domain" in device.attributes)', device)


RUNTIME_ERRORS = [
    case('device.attributes["gpu.example.com"].serial == "x"', "no such key: serial",
         "missing-id"),
    case('device.attributes["unknown.domain"].model == "x"', "no such key: model",
         "missing-id-in-unknown-domain"),
    case('device.capacity["gpu.example.com"].nope.isGreaterThan(quantity("1"))',
         "no such key: nope", "missing-capacity"),
    case('device.attributes["gpu.example.com"].model', "must evaluate to bool, got string",
         "dyn-string-result"),
    case('device.attributes["gpu.example.com"].index', "must evaluate to bool, got int",
         "dyn-int-result"),
    case('device.attributes["gpu.example.com"].model.isGreaterThan(semver("1.0.0"))',
         "no such overload", "semver-method-on-string"),
    case('device.attributes["gpu.example.com"].driverVersion.compareTo(quantity("1")) == 0',
         "no such overload", "semver-vs-quantity"),
    case('sign(quantity("10Mo")) == 1', "regular expression", "bad-quantity"),
    case('semver("v1.0") == semver("1.0.0")', "semantic version", "bad-semver"),
    case("1 / 0 == 1", "divide by zero", "division"),
    case('"x".matches("[")', "invalid regular expression", "bad-regex"),
]


@pytest.mark.parametrize(("expression", "message"), RUNTIME_ERRORS)
def test_runtime_errors(expression, message):
    with pytest.raises(cel.CelError) as info:
        matches(expression)
    assert info.value.kind == "runtime"
    assert message in info.value.message
    assert info.value.expression == expression


def test_error_message_names_expression():
    expression = "device.attributes['gpu.example.com'].model2 == 'a100'"
    with pytest.raises(cel.CelError) as info:
        matches(expression)
    assert str(info.value) == f'CEL selector "{expression}": no such key: model2'
    assert isinstance(info.value, ValueError)


def test_cel_error_pickles():
    error = cel.CelError("x", "boom", "runtime")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.expression, copy.message, copy.kind, str(copy)) == (
        "x", "boom", "runtime", str(error))


COMPILE_ERRORS = [
    case("device.driver ==", "Syntax error", "syntax"),
    case("device.driver", "must evaluate to bool, not string", "string-result"),
    case('device.attributes["gpu.example.com"]', "must evaluate to bool, not map", "map-result"),
    case('quantity("1")', "must evaluate to bool, not kubernetes.Quantity", "quantity-result"),
    case("device.model == 'x'", "undeclared reference to 'device.model'", "unknown-field"),
    case("unknownFunction(1)", "undeclared reference to 'unknownFunction'", "unknown-function"),
    case('quantity("1") == 1', "no matching overload", "quantity-vs-int"),
    case("semver(1)", "no matching overload", "semver-of-int"),
    case('"a".reverse() == "a"', "undeclared reference to 'reverse'", "strings-v3-only"),
    case("x == 1", "undeclared reference to 'x'", "unknown-variable"),
    case('quantity("1").sign() == 1', "undeclared reference to 'sign'", "sign-is-not-a-method"),
]


@pytest.mark.parametrize(("expression", "message"), COMPILE_ERRORS)
def test_compile_errors(expression, message):
    with pytest.raises(cel.CelError) as info:
        cel.compile_selector(expression)
    assert info.value.kind == "compile"
    assert message in info.value.message


def test_expression_length_limit():
    padding = " " * (cel.MAX_EXPRESSION_LENGTH - len("true"))
    assert cel.compile_selector("true" + padding).matches(example_gpu())
    with pytest.raises(cel.CelError, match="10241 bytes long, the limit is 10240") as info:
        cel.compile_selector("true " + padding)
    assert info.value.kind == "compile"


def test_compiled_selectors_are_cached():
    expression = 'device.driver == "cache.example.com"'
    assert cel.compile_selector(expression) is cel.compile_selector(expression)
    for _ in range(2):  # a cached compile error is raised afresh each time
        with pytest.raises(cel.CelError, match="Syntax error"):
            cel.compile_selector("device.driver ==")


# -- Kubernetes libraries ---------------------------------------------------------------

SEMVER = [
    case('semver("1.0.0") == semver("1.0.0")', True, "equal"),
    case('semver("1.0.0+build") == semver("1.0.0")', True, "equality-ignores-build"),
    case('semver("1.2.3").major() == 1', True, "major"),
    case('semver("1.2.3").minor() == 2', True, "minor"),
    case('semver("1.2.3").patch() == 3', True, "patch"),
    case('semver("1.2.3").isGreaterThan(semver("1.2.2"))', True, "isGreaterThan"),
    case('semver("1.2.3").isLessThan(semver("1.10.0"))', True, "isLessThan-numeric"),
    case('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True, "prerelease-before"),
    case('semver("1.0.0-beta.11").isGreaterThan(semver("1.0.0-beta.2"))', True,
         "prerelease-numeric"),
    case('semver("1.2.3").compareTo(semver("1.2.3")) == 0', True, "compareTo-equal"),
    case('semver("1.2.3").compareTo(semver("2.0.0")) == -1', True, "compareTo-less"),
    case('semver("1.2.3").compareTo(semver("0.1.2")) == 1', True, "compareTo-greater"),
    case('isSemver("1.0.0")', True, "isSemver"),
    case('isSemver("hello")', False, "isSemver-word"),
    case('isSemver("v1.0")', False, "isSemver-strict"),
    case('isSemver("v1.0", true)', True, "isSemver-normalize"),
    case('isSemver("01.01.01", true)', True, "isSemver-normalize-zeros"),
    case('semver("v1.0", true) == semver("1.0.0")', True, "semver-normalize"),
    case('semver("01.01.01", true).minor() == 1', True, "semver-normalize-zeros"),
]


@pytest.mark.parametrize(("expression", "expected"), SEMVER)
def test_semver_library(expression, expected):
    assert matches(expression) is expected


QUANTITY = [
    case('quantity("200M") == quantity("0.2G")', True, "equality-semantic"),
    case('quantity("1") == quantity("1000m")', True, "equality-millis"),
    case('quantity("200M") == quantity("0.3G")', False, "inequality"),
    case('quantity("50M").isLessThan(quantity("50Mi"))', True, "isLessThan"),
    case('quantity("100M").isLessThan(quantity("50M"))', False, "isLessThan-false"),
    case('quantity("150Mi").isGreaterThan(quantity("100Mi"))', True, "isGreaterThan"),
    case('quantity("200M").compareTo(quantity("0.2G")) == 0', True, "compareTo-equal"),
    case('quantity("50M").compareTo(quantity("50Mi")) == -1', True, "compareTo-less"),
    case('quantity("50Mi").compareTo(quantity("50M")) == 1', True, "compareTo-greater"),
    case('quantity("50k").add(quantity("20")) == quantity("50.02k")', True, "add"),
    case('quantity("50k").add(20) == quantity("50020")', True, "add-int"),
    case('quantity("50k").sub(quantity("20")) == quantity("49.98k")', True, "sub"),
    case('quantity("50k").sub(20000) == quantity("30k")', True, "sub-int"),
    case('quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20")', True,
         "chain"),
    case('quantity("50k").asInteger() == 50000', True, "asInteger"),
    case('quantity("50k").add(20).sub(quantity("100k")).asInteger() == -49980', True,
         "asInteger-negative"),
    case('quantity("50").isInteger()', True, "isInteger"),
    case('quantity("1500m").isInteger()', False, "isInteger-fraction"),
    case('quantity("9999999999999999999999999999999999999G").isInteger()', False,
         "isInteger-overflow"),
    case('quantity("50.703k").asApproximateFloat() == 50703.0', True, "asApproximateFloat"),
    case('sign(quantity("-1")) == -1', True, "sign-negative"),
    case('sign(quantity("0")) == 0', True, "sign-zero"),
    case('sign(quantity("40Gi")) == 1', True, "sign-positive"),
    case('isQuantity("1.3Gi")', True, "isQuantity"),
    case('isQuantity("10000k")', True, "isQuantity-k"),
    case('isQuantity("1,3G")', False, "isQuantity-comma"),
    case('isQuantity("200K")', False, "isQuantity-capital-k"),
    case('isQuantity("Three")', False, "isQuantity-word"),
]


@pytest.mark.parametrize(("expression", "expected"), QUANTITY)
def test_quantity_library(expression, expected):
    assert matches(expression) is expected


def test_as_integer_overflow_is_an_error():
    with pytest.raises(cel.CelError, match="cannot convert value to integer"):
        matches('quantity("9999999999999999999999999999999999999G").asInteger() == 0')


STRINGS_AND_MACROS = [
    case('"GPU".lowerAscii() == "gpu"', True, "lowerAscii"),
    case('"gpu".upperAscii() == "GPU"', True, "upperAscii"),
    case('"a,b,c".split(",").size() == 3', True, "split"),
    case('["a", "b"].join("-") == "a-b"', True, "join"),
    case('"a-b".replace("-", "_") == "a_b"', True, "replace"),
    case('"  a  ".trim() == "a"', True, "trim"),
    case('"abc".indexOf("c") == 2', True, "indexOf"),
    case('"abcabc".lastIndexOf("a") == 3', True, "lastIndexOf"),
    case('"abc".substring(1) == "bc"', True, "substring"),
    case('"abc".charAt(1) == "b"', True, "charAt"),
    case('"%s-%d".format(["a", 1]) == "a-1"', True, "format"),
    case('strings.quote("a") == "\\"a\\""', True, "quote"),
    case('"abc".startsWith("ab") && "abc".endsWith("bc") && "abc".contains("b")', True,
         "builtin-strings"),
    case('"A100-PCIE".matches("^A1[0-9]+")', True, "matches"),
    case('"pci0000:64".find("[0-9]+:[0-9]+") == "0000:64"', True, "find"),
    case('"abc".find("x") == ""', True, "find-none"),
    case('"a1b22c333".findAll("[0-9]+") == ["1", "22", "333"]', True, "findAll"),
    case('"a1b22c333".findAll("[0-9]+", 2) == ["1", "22"]', True, "findAll-limit"),
    case('"a1b22c333".findAll("[0-9]+", 0) == []', True, "findAll-zero"),
    # Go's FindAllString: an empty match abutting the previous match is skipped.
    case('"baaa".findAll("a*") == ["", "aaa"]', True, "findAll-empty-after-match"),
    case('"abc".findAll("") == ["", "", "", ""]', True, "findAll-empty-pattern"),
    case('"ab".findAll("a|") == ["a", ""]', True, "findAll-empty-alternative"),
    case('"x".find("\\\\pL") == "x"', True, "find-unicode-class"),
    case("[1, 2, 3].isSorted()", True, "isSorted"),
    case('["b", "a"].isSorted()', False, "isSorted-false"),
    case("[1, 2, 3].sum() == 6", True, "sum"),
    case("[1.5, 2.5].sum() == 4.0", True, "sum-double"),
    case("[3, 1, 2].min() == 1", True, "min"),
    case('["a", "c", "b"].max() == "c"', True, "max"),
    case("cel.bind(x, 40, x + 2 == 42)", True, "cel.bind"),
    case('cel.bind(a, device.attributes["gpu.example.com"], a.index == 0 && '
         'a.model.startsWith("LATEST"))', True, "cel.bind-domain"),
    case("[1, 2, 3].exists(x, x > 2) && [1, 2].all(x, x > 0)", True, "exists-all"),
    case("[1, 2, 3].filter(x, x > 1).map(x, x * 2) == [4, 6]", True, "filter-map"),
    case("[1, 2].exists_one(x, x == 1)", True, "exists_one"),
    case('optional.of(1).hasValue() && !optional.none().hasValue()', True, "optional"),
]


@pytest.mark.parametrize(("expression", "expected"), STRINGS_AND_MACROS)
def test_strings_regex_lists_and_macros(expression, expected):
    assert matches(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [("[].min() == 1", "min called on empty list"),
     ('[1, "a"].max() == 1', "no such overload"),
     ("[9223372036854775807, 1].sum() == 0", "overflows")],
    ids=["min-empty", "max-mixed", "sum-overflow"])
def test_list_library_errors(expression, message):
    with pytest.raises(cel.CelError, match=message):
        matches(expression)


# -- version and quantity attributes ------------------------------------------------------

ATTRIBUTE_TYPES = [
    case('device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("0.9.0"))',
         True, "version-isGreaterThan"),
    case('device.attributes["gpu.example.com"].driverVersion == semver("1.0.0")', True,
         "version-equals"),
    case('device.attributes["gpu.example.com"].driverVersion.major() >= 1', True,
         "version-major"),
    case('device.attributes["gpu.example.com"].driverVersion.compareTo(semver("2.0.0")) < 0',
         True, "version-compareTo"),
    case('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', True,
         "quantity-compareTo"),
    case('device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("80Gi"))', False,
         "quantity-not-greater"),
    case('device.capacity["gpu.example.com"].memory == quantity("80Gi")', True,
         "quantity-equals"),
    case('device.capacity["gpu.example.com"].memory.asInteger() == 85899345920', True,
         "quantity-asInteger"),
    case('device.capacity["gpu.example.com"].compute.add(1) == quantity("101")', True,
         "quantity-add"),
]


@pytest.mark.parametrize(("expression", "expected"), ATTRIBUTE_TYPES)
def test_version_and_quantity_attributes(expression, expected):
    assert matches(expression) is expected


def test_prerelease_version_attribute():
    device = example_gpu(driverVersion=V("2.0.0-rc.1+build.5"))
    assert matches('device.attributes["gpu.example.com"].driverVersion'
                   '.isLessThan(semver("2.0.0"))', device)
    assert matches('device.attributes["gpu.example.com"].driverVersion'
                   ' == semver("2.0.0-rc.1")', device)


# -- realistic selectors from driver documentation --------------------------------------------

REALISTIC = [
    case("device.driver == 'gpu.nvidia.com' && "
         "device.attributes['gpu.nvidia.com'].type == 'gpu'", [True, False, False],
         "nvidia-gpu-class"),
    case("device.driver == 'gpu.nvidia.com' && "
         "device.attributes['gpu.nvidia.com'].type == 'mig'", [False, True, False],
         "nvidia-mig-class"),
    case("device.driver == 'gpu.example.com'", [False, False, True], "example-class"),
    case("device.attributes['gpu.nvidia.com'].productName.matches('A100')",
         [True, "no such key: productName", "no such key: productName"], "productName-matches"),
    case("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('10Gi'))",
         [True, False, "no such key: memory"], "memory-greater"),
    case("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
         [True, False, "no such key: memory"], "memory-at-least"),
    case("device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
         ["no such key: profile", True, "no such key: profile"], "mig-profile"),
    case("device.driver == 'gpu.nvidia.com' && "
         "device.attributes['gpu.nvidia.com'].driverVersion.major() >= 550",
         [True, "no such key: driverVersion", False], "driver-major"),
    case("device.attributes['gpu.nvidia.com'].cudaComputeCapability"
         ".isGreaterThan(semver('7.5.0'))",
         [True, "no such key: cudaComputeCapability", "no such key: cudaComputeCapability"],
         "compute-capability"),
    case("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:64'",
         [True, "no such key: pcieRoot", True], "pcie-root"),
    case("device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL' && "
         "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0",
         ["no such key: model", "no such key: model", True], "example-model-and-memory"),
    case("cel.bind(nv, device.attributes['gpu.nvidia.com'], has(nv.productName) && "
         "nv.productName.lowerAscii().contains('a100'))", [True, False, False],
         "bind-has-lowerAscii"),
]


@pytest.mark.parametrize(("expression", "expected"), REALISTIC)
def test_realistic_selectors(expression, expected):
    selector = cel.compile_selector(expression)
    for device, want in zip([nvidia_a100(), mig_device(), example_gpu()], expected, strict=True):
        if isinstance(want, bool):
            assert selector.matches(device) is want, device
        else:
            with pytest.raises(cel.CelError, match=want):
                selector.matches(device)


# -- device_input --------------------------------------------------------------------------


def test_bare_and_qualified_names_meet_in_one_domain():
    device = cel.device_input("dra.example.com", {"a": 1, "dra.example.com/b": 2}, {}, False)
    assert matches('device.attributes["dra.example.com"].a + '
                   'device.attributes["dra.example.com"].b == 3', device)


def test_device_input_is_reusable_across_selectors():
    device = nvidia_a100()
    results = [cel.compile_selector(e).matches(device) for e in
               ["device.attributes['gpu.nvidia.com'].brand == 'Nvidia'",
                "device.attributes['other.com'].size() == 0",
                "device.attributes['gpu.nvidia.com'].brand == 'Nvidia'"]]
    assert results == [True, True, True]


@pytest.mark.parametrize(
    ("attributes", "capacity", "error"),
    [({"x": 1.5}, {}, TypeError), ({"x": 2**63}, {}, ValueError), ({}, {"m": 5}, TypeError),
     ({"x": None}, {}, TypeError)],
    ids=["float", "int-overflow", "capacity-not-quantity", "none"])
def test_device_input_rejects_what_a_slice_cannot_hold(attributes, capacity, error):
    with pytest.raises(error):
        cel.device_input("d.example.com", attributes, capacity, False)


def test_evaluate_helper():
    assert cel.evaluate("device.driver == 'gpu.nvidia.com'",
                        [nvidia_a100(), example_gpu()]) == [True, False]


# -- documented gaps (these pin our behaviour; Kubernetes differs) ---------------------------


def test_gap_is_integer_is_mathematical():
    # Kubernetes answers false for quantities it stores with a negative scale.
    assert matches('quantity("1000m").isInteger()')


@pytest.mark.parametrize(
    "expression",
    ["has(device.attributes.unknown)", 'device.attributes[?"unknown.domain"].hasValue()'],
    ids=["has", "optional-index"])
def test_gap_presence_of_unknown_domain(expression):
    # Kubernetes' default-valued map reports every domain present (true).
    assert not matches(expression)


def test_gap_device_alone_is_not_a_value():
    with pytest.raises(cel.CelError, match="undeclared reference to 'device'"):
        cel.compile_selector("cel.bind(d, device, d.driver == 'x')")


def test_regex_is_linear_time_re2():
    """A nested quantifier that makes a backtracking engine run for hours (Python's
    ``re`` on 40 a's and a "!") answers at once with RE2, as in Kubernetes: the test's
    timeout would end it otherwise."""
    assert matches('"' + "a" * 40 + '!".find("^(a+)+$") == ""') is True
    assert matches('"' + "a" * 40 + '!".findAll("(a|aa)+$").size() == 0') is True


@pytest.mark.parametrize("pattern", ["(?=x)", "(a)\\\\1", "(?<!x)y"],
                         ids=["lookahead", "backreference", "lookbehind"])
def test_regex_outside_re2_syntax_is_an_error(pattern):
    """Go's regexp (RE2 syntax) refuses lookaround and backreferences; so does fitcore,
    with the pattern in the message, instead of running them with another engine."""
    with pytest.raises(cel.CelError, match="invalid regular expression"):
        matches(f'"xy".find("{pattern}") == ""')


@pytest.mark.parametrize(("expression", "expected"), [
    ('quantity("1e10000").compareTo(quantity("1")) > 0', True),
    ('quantity("1e10000") == quantity("10e9999")', True),
    ('quantity("-1e10000").isLessThan(quantity("1e-9"))', True),
    ('quantity("1e10000").add(quantity("1")).compareTo(quantity("1e10000")) == 1', True),
    ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("1e10000"))', True),
], ids=["compare", "equal", "negative", "add", "capacity"])
def test_quantities_beyond_python_int_string_limit(expression, expected):
    """Kubernetes accepts quantities such as "1e10000"; Python refuses to write an int of
    more than 4,300 decimal digits. The CEL values hold them exactly all the same."""
    assert matches(expression) is expected


def test_a_device_capacity_beyond_python_int_string_limit():
    huge = values.Quantity.parse("1e10000")
    device = cel.device_input("gpu.example.com", {}, {"memory": huge}, False)
    assert matches('device.capacity["gpu.example.com"].memory.compareTo(quantity("1")) == 1',
                   device) is True
