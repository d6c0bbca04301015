"""The figures scenarios measure, and the table printed at the end of a run.

A scenario records its rows with ``record(...)``; pytest's terminal summary (see
``e2e/tests/conftest.py``) and the demo print ``table()``. Rows are kept in process memory
in the order they were recorded.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Row:
    scenario: str
    check: str         # which admission check ran ("built-in ProvisioningRequest", "fitgate")
    outcome: str       # e.g. "all 4 pods Running", "not running after 75 s"
    seconds: float | None   # submit to all pods Running / all decided; None: never
    nodes: str         # nodes provisioned, e.g. "4 (s1-builtin-cheap)"
    unused_node_seconds: float | None
    note: str = ""
    # What the unused node-seconds cost at the node groups' prices (price × node-hours);
    # None where a scenario does not price its nodes.
    cost: float | None = None


_ROWS: list[Row] = []
_DETAILS: list[str] = []


def record(row: Row) -> Row:
    _ROWS.append(row)
    return row


def detail(lines: list[str]) -> None:
    """Lines printed under the table (a scenario's breakdown of its row)."""
    _DETAILS.extend(lines)


def details() -> list[str]:
    return list(_DETAILS)


def rows() -> list[Row]:
    return list(_ROWS)


def _cell(value: float | None, none: str = "—") -> str:
    return none if value is None else f"{value:.1f}"


def _cost(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def table(selected: list[Row] | None = None) -> str:
    """The rows as an aligned text table (empty string when there are none)."""
    selected = rows() if selected is None else selected
    if not selected:
        return ""
    priced = any(r.cost is not None for r in selected)
    head: tuple[str, ...] = ("scenario", "check", "time (s)", "nodes provisioned",
                             "unused node-s", *(("unused cost",) if priced else ()),
                             "outcome")
    body = [(r.scenario, r.check, _cell(r.seconds), r.nodes, _cell(r.unused_node_seconds),
             *((_cost(r.cost),) if priced else ()),
             r.outcome + (f"; {r.note}" if r.note else "")) for r in selected]
    widths = [max(len(str(line[i])) for line in (head, *body)) for i in range(len(head))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(head), sep, *(fmt(line) for line in body)])
