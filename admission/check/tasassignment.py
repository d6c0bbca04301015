"""Kueue's topology assignment of a Workload, read (issue #25; `topology` decides on it).

`assignment` reads the domains and pod counts Kueue's topology-aware scheduling assigned
each pod set at quota reservation (v1beta2 `status.admission.podSetAssignments[].
topologyAssignment`: `levels`, and `slices` of `domainCount` domains, each level's value
`universal` or `individual` prefix+root+suffix, pod counts `universal` or `individual`),
naming the Workload and the field of every problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fitcore
from admission.engine import gangs


def assignment(wl: Mapping[str, Any]) -> dict[str, tuple[fitcore.Domain, ...]]:
    """The topology domains Kueue assigned, per pod set name ({} when none has any).
    Raises fitcore.InputError naming the Workload and the field of every problem."""
    who = gangs.describe(wl)
    status = wl.get("status")
    admission = status.get("admission") if isinstance(status, Mapping) else None
    raw = admission.get("podSetAssignments") if isinstance(admission, Mapping) else None
    if not isinstance(raw, list):
        return {}
    out: dict[str, tuple[fitcore.Domain, ...]] = {}
    problems: list[fitcore.FieldError] = []
    for i, psa in enumerate(raw):
        if not isinstance(psa, Mapping) or psa.get("topologyAssignment") is None:
            continue
        path = f"status.admission.podSetAssignments[{i}].topologyAssignment"
        domains = _domains(who, path, psa["topologyAssignment"], problems)
        if domains:
            out[str(psa.get("name") or "main")] = domains
    if problems:
        raise fitcore.InputError(problems)
    return out


def _domains(who: str, path: str, ta: Any, problems: list[fitcore.FieldError]
             ) -> tuple[fitcore.Domain, ...]:
    def bad(field: str, text: str) -> tuple[fitcore.Domain, ...]:
        problems.append(fitcore.FieldError(who, f"{path}{field}", text))
        return ()

    if not isinstance(ta, Mapping):
        return bad("", "must be an object")
    levels = ta.get("levels")
    if not isinstance(levels, list) or not levels or not all(
            isinstance(x, str) and x for x in levels):
        return bad(".levels", "must be a non-empty list of node label keys")
    slices = ta.get("slices")
    if not isinstance(slices, list):
        return bad(".slices", "must be a list")
    out: list[fitcore.Domain] = []
    for s, sl in enumerate(slices):
        spath = f".slices[{s}]"
        if not isinstance(sl, Mapping):
            bad(spath, "must be an object")
            continue
        count = sl.get("domainCount")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            bad(f"{spath}.domainCount", f"must be an integer of at least 1, got {count!r}")
            continue
        values = sl.get("valuesPerLevel")
        if not isinstance(values, list) or len(values) != len(levels):
            bad(f"{spath}.valuesPerLevel", f"must have one entry per level ({len(levels)})")
            continue
        per_level: list[list[str]] = []
        for k, v in enumerate(values):
            got = _level_values(v, count)
            if isinstance(got, str):
                bad(f"{spath}.valuesPerLevel[{k}]", got)
                break
            per_level.append(got)
        else:
            pods = _pod_counts(sl.get("podCounts"), count)
            if isinstance(pods, str):
                bad(f"{spath}.podCounts", pods)
                continue
            for j in range(count):
                out.append(fitcore.Domain(
                    {levels[k]: per_level[k][j] for k in range(len(levels))}, pods[j]))
    return tuple(out)


def _level_values(v: Any, count: int) -> list[str] | str:
    """The values of one level for `count` domains, or what is wrong."""
    if not isinstance(v, Mapping) or ("universal" in v) == ("individual" in v):
        return "must set exactly one of universal and individual"
    if "universal" in v:
        u = v["universal"]
        return [u] * count if isinstance(u, str) and u else "universal must be a value"
    ind = v["individual"]
    roots = ind.get("roots") if isinstance(ind, Mapping) else None
    if not isinstance(roots, list) or len(roots) != count or not all(
            isinstance(r, str) for r in roots):
        return f"individual.roots must be {count} values (domainCount)"
    prefix, suffix = ind.get("prefix") or "", ind.get("suffix") or ""
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        return "individual.prefix and suffix must be strings"
    return [f"{prefix}{r}{suffix}" for r in roots]


def _pod_counts(p: Any, count: int) -> list[int] | str:
    if not isinstance(p, Mapping) or ("universal" in p) == ("individual" in p):
        return "must set exactly one of universal and individual"
    if "universal" in p:
        u = p["universal"]
        if isinstance(u, bool) or not isinstance(u, int) or u < 1:
            return f"universal must be an integer of at least 1, got {u!r}"
        return [u] * count
    ind = p["individual"]
    if not isinstance(ind, list) or len(ind) != count or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in ind):
        return f"individual must be {count} integers of at least 1 (domainCount)"
    return list(ind)
