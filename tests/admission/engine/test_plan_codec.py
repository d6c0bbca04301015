"""One codec for a Plan: the check's annotation is fitcore's `Plan.to_json`, compact."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

import fitcore
from admission.check import provisioning

#: An annotation as fitgate has written it since plans were stored (compact, sorted).
STORED = ('{"domains":{"workers":"rail-new-domain-0"},"placements":[{"index":0,"node":'
          '"rail-new-0","podSet":"workers"},{"index":1,"node":"rail-new-1","podSet":'
          '"workers"}],"price":"24","shapes":[{"count":2,"domain":"rail-new-domain-0",'
          '"shape":"rail"}]}')


def test_the_stored_annotation_reads_and_writes_back_unchanged() -> None:
    p = provisioning.plan_from_json(STORED, existing_nodes=["n1"])
    assert p.shapes == (fitcore.ShapeCount("rail", 2, "rail-new-domain-0"),)
    assert p.price == Fraction(24) and p.existing_nodes == frozenset({"n1"})
    assert [(pl.pod_set, pl.index, pl.node) for pl in p.placements] == [
        ("workers", 0, "rail-new-0"), ("workers", 1, "rail-new-1")]
    assert provisioning.plan_to_json(p) == STORED


def test_fitcore_reads_the_annotation_itself() -> None:
    p = fitcore.Plan.from_json(json.loads(STORED))
    assert provisioning.plan_to_json(p) == STORED


@pytest.mark.parametrize("text", ["[]", "{}", '{"shapes":[{"shape":"rail","count":0}]}',
                                  "not json"])
def test_a_broken_annotation_is_a_plan_format_error(text: str) -> None:
    with pytest.raises(provisioning.PlanFormatError):
        provisioning.plan_from_json(text)
