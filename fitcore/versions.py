"""The Kubernetes versions fitgate follows, and what differs between them with default
features (the scheduler's default feature gates and the allocator variant they pick).
`docs/semantics.md` lists the differences."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class KubeVersion:
    minor: int
    #: DRADeviceTaintRules on by default (GA in 1.37; beta, off, in 1.36).
    device_taint_rules: bool
    #: A DeviceTaintRule without deviceSelector matches no device (1.37) or all (1.36).
    taint_rule_without_selector_matches_nothing: bool
    #: allocationMode All picks devices by their static capacity, so a shared device
    #: whose remaining capacity is too small fails the request (1.37); 1.36 leaves it out.
    all_checks_static_capacity: bool
    #: A device allocated for sharing (allowMultipleAllocations) without consumed
    #: capacity counts as shared: a further share does not charge its counters (1.37).
    shared_without_capacity_is_shared: bool
    #: A negative or unrepresentable capacity request aborts the allocation (1.37); 1.36
    #: takes a negative one as it is.
    capacity_errors_abort: bool
    #: DRAFractionalCapacityRange (beta, on in 1.37): a validRange of whole milli-units
    #: rounds in milli-units (`semantics.capacity_unrepresentable`).
    fractional_capacity_range: bool = False

    def __str__(self) -> str:
        return f"1.{self.minor}"


V1_36 = KubeVersion(36, device_taint_rules=False,
                    taint_rule_without_selector_matches_nothing=False,
                    all_checks_static_capacity=False, shared_without_capacity_is_shared=False,
                    capacity_errors_abort=False)
V1_37 = KubeVersion(37, device_taint_rules=True,
                    taint_rule_without_selector_matches_nothing=True,
                    all_checks_static_capacity=True, shared_without_capacity_is_shared=True,
                    capacity_errors_abort=True, fractional_capacity_range=True)
BY_NAME = {str(v): v for v in (V1_36, V1_37)}
DEFAULT = V1_36


def parse(text: str) -> KubeVersion:
    """`1.36`, `v1.37.2`, ... → the version fitgate follows (ValueError if none)."""
    parts = text.strip().lstrip("v").split(".")
    key = ".".join(parts[:2])
    if key not in BY_NAME:
        raise ValueError(f"Kubernetes {text!r} is not followed; one of {', '.join(BY_NAME)}")
    return BY_NAME[key]
