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

    def __str__(self) -> str:
        return f"1.{self.minor}"


V1_36 = KubeVersion(36, device_taint_rules=False,
                    taint_rule_without_selector_matches_nothing=False)
V1_37 = KubeVersion(37, device_taint_rules=True,
                    taint_rule_without_selector_matches_nothing=True)
BY_NAME = {str(v): v for v in (V1_36, V1_37)}
DEFAULT = V1_36


def parse(text: str) -> KubeVersion:
    """`1.36`, `v1.37.2`, ... → the version fitgate follows (ValueError if none)."""
    parts = text.strip().lstrip("v").split(".")
    key = ".".join(parts[:2])
    if key not in BY_NAME:
        raise ValueError(f"Kubernetes {text!r} is not followed; one of {', '.join(BY_NAME)}")
    return BY_NAME[key]
