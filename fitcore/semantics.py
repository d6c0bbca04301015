"""Per-device rules both engines share: selection, capacity, attributes.

These are the questions about one device and one request that do not depend on what
else the search has picked; the engines differ only in how they search.
"""

from __future__ import annotations

from collections.abc import Mapping

from fitcore import cel, model, predicates, reads, values


class SelectionError(Exception):
    """A CEL selector failed at runtime on a device: the claim cannot be allocated as written."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Selector:
    """Evaluates class and request selectors on devices, each (expression, device) once.

    With `by_content`, results are kept by (expression, what the expression can read of
    the device: driver, the attributes it may read (`fitcore.reads`), capacities,
    allowMultipleAllocations), so devices that differ only in attributes the expression
    does not read (a `uuid`) share one evaluation; devices are kept alive with what is
    remembered of them. Past `limit` remembered devices everything is forgotten at once.
    """

    def __init__(self, *, by_content: bool = False, limit: int = 1 << 20) -> None:
        self._by_content = by_content
        self._limit = limit
        self._inputs: dict[int, cel.DeviceInput] = {}
        self._results: dict[tuple[str, object], bool | str] = {}
        self._contents: dict[tuple[str, int], tuple[model.Device, object]] = {}
        # Per (expression, attribute names of a device): those it may read, sorted.
        self._kept: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}

    def size(self) -> int:
        return len(self._results)

    def _input(self, driver: str, device: model.Device) -> cel.DeviceInput:
        key = id(device)
        found = self._inputs.get(key)
        if found is None:
            capacity = {name: cap.value for name, cap in device.capacity.items()}
            found = cel.device_input(driver, device.attributes, capacity,
                                     device.allow_multiple_allocations)
            self._inputs[key] = found
        return found

    def _content(self, expression: str, driver: str, device: model.Device) -> object:
        hit = self._contents.get((expression, id(device)))
        if hit is not None and hit[0] is device:
            return hit[1]
        if len(self._contents) > self._limit:
            self._contents.clear()
            self._results.clear()
        a = device.attributes
        # The names the expression may read, sorted, per list of names a device publishes
        # (devices of a driver publish the same few lists).
        names = tuple(a)
        kept = self._kept.get((expression, names))
        if kept is None:
            if len(self._kept) > 4096:
                self._kept.clear()
            read = reads.attributes(expression)
            kept = self._kept[(expression, names)] = tuple(sorted(
                name for name in names if read is None or name.rpartition("/")[2] in read))
        attrs = tuple([(name, type(v).__name__, str(v)) for name in kept
                       for v in (a[name],)])
        capacity = device.capacity
        content = (driver, attrs, tuple(sorted((n, c.value) for n, c in capacity.items()))
                   if capacity else (), device.allow_multiple_allocations)
        self._contents[(expression, id(device))] = (device, content)
        return content

    def matches(self, expressions: tuple[str, ...], driver: str, device: model.Device,
                owner: str) -> bool:
        """All expressions true, evaluated in order and stopping at the first false.

        Raises SelectionError naming `owner` (the class or claim) on a runtime error.
        """
        for i, expression in enumerate(expressions):
            key: tuple[str, object] = (expression, self._content(expression, driver, device)
                                       if self._by_content else id(device))
            result = self._results.get(key)
            if result is None:
                try:
                    result = cel.compile_selector(expression).matches(
                        cel.device_input(
                            driver, device.attributes,
                            {name: cap.value for name, cap in device.capacity.items()},
                            device.allow_multiple_allocations)
                        if self._by_content else self._input(driver, device))
                except cel.CelError as exc:
                    result = exc.message
                self._results[key] = result
            if isinstance(result, str):
                raise SelectionError(
                    f"{owner}: selector #{i} fails on device {driver}/{device.name}: {result}")
            if not result:
                return False
        return True


def device_selectable(selector: Selector, device_class: model.DeviceClass,
                      alternative: model.ExactRequest, request_label: str, driver: str,
                      device: model.Device) -> bool:
    """Class selectors, then the request's own selectors; `request_label` names the
    request in errors (`ResourceClaim ns/name request req/sub`)."""
    if not selector.matches(device_class.selectors, driver, device,
                            f"DeviceClass {device_class.name}"):
        return False
    return selector.matches(alternative.selectors, driver, device,
                            request_label)


def lookup_attribute(driver: str, device: model.Device, name: str
                     ) -> model.AttributeValue | None:
    """A fully qualified attribute; a bare name stands for the driver's own domain."""
    found = device.attributes.get(name)
    if found is not None:
        return found
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    return device.attributes.get(ident)


def attribute_key(value: model.AttributeValue) -> tuple[str, object]:
    """A hashable key under which two values are equal exactly when matchAttribute says so:
    same type and same value (versions compare by their text)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, values.Version):
        return ("version", value.text)
    return ("string", value)


def taint_allows(device: model.Device, alternative: model.ExactRequest) -> bool:
    return not any(predicates.taint_blocks(t, alternative.tolerations) for t in device.taints)


# --------------------------------------------------------------- consumable capacity


def _consumed(requested: values.Quantity | None, capacity: model.DeviceCapacity,
              milli: bool = False) -> values.Quantity:
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    rng = policy.valid_range
    if rng is not None:
        if rng.step is None:
            return rng.min if requested < rng.min else requested
        if milli and _milli_range(rng) and requested >= rng.min:
            request, lo = requested.value * 1000, int(rng.min.value * 1000)
            step = int(rng.step.value * 1000)
            if request.denominator != 1:
                return requested  # unrepresentable: capacity_unrepresentable says so first
            rounded = lo + step * -(-(int(request) - lo) // step)
            return values.Quantity.parse(f"{rounded}m")
        return requested.round_up_to_step(rng.min, rng.step)
    if policy.valid_values:
        return requested.round_up_to_one_of(policy.valid_values) or requested
    return requested


def _violates(amount: values.Quantity, policy: model.RequestPolicy | None,
              milli: bool = False) -> bool:
    if policy is None:
        return False
    if policy.default is not None and amount == policy.default:
        return False
    if policy.valid_range is not None:
        rng = policy.valid_range
        if rng.max is not None and amount > rng.max:
            return True
        if rng.step is not None and milli and _milli_range(rng):
            exact = amount.value * 1000
            return exact.denominator != 1 or \
                abs(int(exact) - int(rng.min.value * 1000)) % int(rng.step.value * 1000) != 0
        return rng.step is not None and not amount.on_step(rng.min, rng.step)
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def capacity_take(alternative: model.ExactRequest, device: model.Device, *,
                  milli: bool = False) -> dict[str, values.Quantity] | None:
    """What one allocation of `device` for `alternative` consumes of each capacity, or
    None when the request cannot be served by this device at all (it names a capacity the
    device lacks, or the rounded amount breaks the device's request policy).

    Requests are rounded to a `validRange` with a step in whole numbers (each of request,
    min and step rounded up first), or, with `milli` (1.37: DRAFractionalCapacityRange,
    beta, on), in milli-units when min, max and step are whole milli-units (step at least
    1m): then 250m in steps of 100m from 200m takes 300m, not 1."""
    requested = alternative.capacity_requests or {}
    if any(name not in device.capacity for name in requested):
        return None
    take: dict[str, values.Quantity] = {}
    for name, cap in device.capacity.items():
        amount = _consumed(requested.get(name), cap, milli)
        if _violates(amount, cap.request_policy, milli):
            return None
        take[name] = amount
    return take


_INT64_MAX = 2**63 - 1


def capacity_unrepresentable(alternative: model.ExactRequest, device: model.Device,
                             *, milli: bool = False) -> str | None:
    """Why the allocator cannot round `alternative`'s capacity request on `device`, or
    None. Upstream (1.37) then aborts the allocation with an error, as soon as its search
    reaches the device: the claim is broken as written.

    Only a request at or above a `validRange` with a step is rounded, and only after the
    device was found to have every requested capacity. On the integer path the request
    must not exceed int64, nor the request rounded up to the next step (whole numbers, as
    `values.Quantity.round_up_to_step`). With `milli` (1.37: DRAFractionalCapacityRange,
    beta, on) a range whose min, max and step are whole milli-units (step at least 1m)
    rounds in milli-units instead: then the request must be a whole number of milli-units
    within int64, and so must its rounded value.
    """
    requested = alternative.capacity_requests
    if not requested or any(name not in device.capacity for name in requested):
        return None
    for name in sorted(requested):
        q = requested[name]
        policy = device.capacity[name].request_policy
        rng = policy.valid_range if policy is not None else None
        if rng is None or rng.step is None or q < rng.min:
            continue
        if milli and _milli_range(rng):
            exact = q.value * 1000
            if exact.denominator != 1 or abs(exact) > _INT64_MAX:
                return (f"capacity {name!r}: request {q} cannot be represented in "
                        f"milli-units (int64)")
            request, lo = int(exact), int(rng.min.value * 1000)
            step = int(rng.step.value * 1000)
            what = "milli-units (int64)"
        else:
            if q.value > _INT64_MAX:
                return f"capacity {name!r}: request {q} cannot be represented (exceeds int64)"
            request, lo, step = q.ceil_int(), rng.min.ceil_int(), rng.step.ceil_int()
            what = "int64"
        steps = -(-(request - lo) // step)
        if lo >= 0 and steps > (_INT64_MAX - lo) // step:
            return (f"capacity {name!r}: request {q} rounded up to the next step of the "
                    f"device's validRange cannot be represented in {what}")
    return None


def _milli_range(rng: model.ValidRange) -> bool:
    for bound in (rng.min, rng.max, rng.step):
        if bound is None:
            continue
        milli = bound.value * 1000
        if milli.denominator != 1 or abs(milli) > _INT64_MAX:
            return False
    return rng.step is not None and rng.step.value * 1000 >= 1


def capacity_fits(device: model.Device, take: Mapping[str, values.Quantity],
                  *used: Mapping[str, values.Quantity] | None) -> bool:
    """Whether `take` still fits next to what is already used (allocated, allocating)."""
    for name, cap in device.capacity.items():
        total = take[name]
        for u in used:
            if u and name in u:
                total = total + u[name]
        if total > cap.value:
            return False
    return True


def add_amounts(into: dict[str, values.Quantity], more: Mapping[str, values.Quantity]) -> None:
    for name, amount in more.items():
        into[name] = into[name] + amount if name in into else amount


def sub_amounts(into: dict[str, values.Quantity], less: Mapping[str, values.Quantity]) -> None:
    for name, amount in less.items():
        into[name] = into[name] - amount

