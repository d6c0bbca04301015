"""Pure predicates the engines share: node selection and taints."""

from __future__ import annotations

from fitcore import model


def requirement_matches(
    requirement: model.NodeSelectorRequirement, value: str | None
) -> bool:
    """One node selector requirement against one label (or field) value."""
    op = requirement.operator
    if op == "In":
        return value is not None and value in requirement.values
    if op == "NotIn":
        return value is None or value not in requirement.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(requirement.values) != 1:
            return False
        try:
            have, want = int(value), int(requirement.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: model.NodeSelectorTerm, node: model.Node) -> bool:
    """A term with no requirements at all matches nothing (Kubernetes rule)."""
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_expressions:
        if not requirement_matches(req, node.labels.get(req.key)):
            return False
    for req in term.match_fields:
        value = node.name if req.key == "metadata.name" else None
        if not requirement_matches(req, value):
            return False
    return True


def selector_matches(selector: model.NodeSelector, node: model.Node) -> bool:
    return any(term_matches(term, node) for term in selector.terms)


def node_matches(
    node: model.Node,
    node_name: str | None,
    all_nodes: bool,
    node_selector: model.NodeSelector | None,
) -> bool:
    """Slice- or device-level node selection, in the allocator's order of precedence."""
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return selector_matches(node_selector, node)
    return False


def taint_blocks(taint: model.DeviceTaint, tolerations: tuple[model.DeviceToleration, ...]) -> bool:
    """Whether a device taint keeps a request away: only NoSchedule and NoExecute count."""
    if taint.effect not in (model.TaintEffect.NO_SCHEDULE, model.TaintEffect.NO_EXECUTE):
        return False
    return not any(t.tolerates(taint) for t in tolerations)
