"""DeviceTaintRules: taints an administrator puts on devices without editing their slices.

A rule (resource.k8s.io, DRADeviceTaintRules) names devices by driver, pool and device
(an empty field matches every value) and adds its taint to each; the scheduler's
allocator then sees the taint as if the slice had published it. Which rules apply
depends on the Kubernetes version fitgate follows (`versions`):

- 1.36: the gate is beta and off by default, so the scheduler applies no rule; fitgate
  reads them and says they are not applied.
- 1.37: GA and on. A rule without `deviceSelector` matches no device (1.36 with the gate
  on matched every device).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from fitcore import errors, fields, kube, model, versions

_EFFECTS = ("None", "NoSchedule", "NoExecute")


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    name: str
    selector: tuple[str, str, str] | None  # (driver, pool, device); "" matches any
    taint: model.DeviceTaint

    def matches(self, driver: str, pool: str, device: str, kube: versions.KubeVersion
                ) -> bool:
        if self.selector is None:
            return not kube.taint_rule_without_selector_matches_nothing
        d, p, n = self.selector
        return (not d or d == driver) and (not p or p == pool) and (not n or n == device)


def rule(obj: Mapping[str, Any], source: str | None = None) -> Rule:
    """A DeviceTaintRule (v1alpha3, v1beta2 or v1: the same fields fitgate reads)."""
    c = errors.Collector(kube.describe(obj, "DeviceTaintRule"), source)
    r = fields.Reader(c)
    name, _ = fields.meta_name(r, obj)
    spec = r.get(obj, "spec", "", Mapping, required=True, default={})
    sel_obj = r.get(spec, "deviceSelector", "spec", Mapping)
    selector = None
    if sel_obj is not None:
        selector = tuple(r.get(sel_obj, k, "spec.deviceSelector", str, default="")
                         for k in ("driver", "pool", "device"))
        for k in ("deviceClassName", "selectors"):
            if sel_obj.get(k):
                c.add(f"spec.deviceSelector.{k}", "is not supported by the scheduler's rule "
                                                  "matching (dropped from the API in v1beta2)")
    taint = r.get(spec, "taint", "spec", Mapping, required=True, default={})
    effect = r.get(taint, "effect", "spec.taint", str, required=True, default="NoSchedule")
    if effect not in _EFFECTS:
        c.add("spec.taint.effect", f"unknown effect {effect!r}; one of {', '.join(_EFFECTS)}")
    key = r.get(taint, "key", "spec.taint", str, required=True, default="")
    c.raise_if_any()
    return Rule(name, selector,
                model.DeviceTaint(key, r.get(taint, "value", "spec.taint", str, default=""),
                                  effect))


def apply(slices: Sequence[model.ResourceSlice], rules: Sequence[Rule],
          kube: versions.KubeVersion) -> tuple[list[model.ResourceSlice], list[str]]:
    """The slices with the rules' taints added (as that version's scheduler sees them),
    and notes on rules that the version does not apply."""
    if not rules:
        return list(slices), []
    if not kube.device_taint_rules:
        names = ", ".join(sorted(r.name for r in rules))
        return list(slices), [f"DeviceTaintRule {names} not applied: DRADeviceTaintRules is "
                              f"off by default in Kubernetes {kube}"]
    out = []
    for s in slices:
        devices = []
        changed = False
        for d in s.devices:
            extra = tuple(r.taint for r in rules if r.matches(s.driver, s.pool, d.name, kube))
            if extra:
                changed = True
                d = dataclasses.replace(d, taints=(*d.taints, *extra))
            devices.append(d)
        out.append(dataclasses.replace(s, devices=tuple(devices)) if changed else s)
    return out, []
