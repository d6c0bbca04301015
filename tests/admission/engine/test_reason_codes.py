"""Programs decide on reason codes, never on wording."""

from __future__ import annotations

import fitcore
from admission.engine import fitting

codes = fitcore.reasons


def _result(*details: fitcore.Reason) -> fitcore.PlanResult:
    return fitcore.PlanResult("unsatisfiable", "configuration",
                              reasons=tuple(d.message for d in details), details=details)


def test_what_a_node_lacks_comes_first_by_code_not_by_word() -> None:
    # A pod set named "offers" whose claims are named after a ResourceClaim: the
    # summary line mentions both words, yet says nothing about a node or a claim.
    lead = codes.reason(codes.NO_HOST, "no node and no shape can host even one pod of "
                        "offers", object="Workload default/ResourceClaim", pod_set="offers")
    node = codes.reason(codes.INSUFFICIENT_RESOURCE, "pod set offers: node n1: needs cpu 4, "
                        "has 2", pod_set="offers", node="n1", resource="cpu", held=0)
    shape = codes.reason(codes.SHAPE_DOES_NOT_FIT, "shape rail: even 2 new nodes do not "
                         "make the gang fit", shape="rail")
    assert fitting.reasons(_result(lead, node, shape)) == (node.message, lead.message,
                                                           shape.message)


def test_reasons_without_details_keep_their_order() -> None:
    result = fitcore.PlanResult("unsatisfiable", "configuration",
                                reasons=("ResourceClaim a/b: broken", "no host"))
    assert fitting.reasons(result) == result.reasons
