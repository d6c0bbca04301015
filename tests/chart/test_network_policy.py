"""The chart's NetworkPolicy (issue #20 item 9), rendered by the real helm: on by
default with only the webhook and health/metrics ports open; the webhook port kept from
the pod network when its ranges are given (the production example gives them), or
limited to `webhookFrom`; the install notes warn while it is open to every source."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.conftest import CHART, Helm, HelmError, by_kind, one

PRODUCTION = CHART.parents[1] / "examples" / "values" / "production.yaml"


def webhook_rule(objects: list[dict[str, Any]]) -> dict[str, Any]:
    policy = one(objects, "NetworkPolicy")
    rules = policy["spec"]["ingress"]
    assert [r["ports"] for r in rules] == [[{"port": "webhook", "protocol": "TCP"}],
                                           [{"port": "http", "protocol": "TCP"}]]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rule: dict[str, Any] = rules[0]
    return rule


def test_the_policy_is_on_by_default_with_two_ports_open(helm: Helm) -> None:
    rule = webhook_rule(helm.template())
    assert "from" not in rule  # no pod network known: open, and the notes say so
    assert "the webhook port is open to every source" in helm.notes()


def test_the_production_example_keeps_pods_off_the_webhook_port(helm: Helm) -> None:
    objects = helm.template(extra=["-f", str(PRODUCTION)])
    assert webhook_rule(objects)["from"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.64.0.0/14"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:64::/56"]}}]
    notes = helm.run("install", "fitgate", str(CHART), "--namespace", "fitgate-system",
                     "--dry-run=client", "-f", str(PRODUCTION))
    assert "WARNING" not in notes


def test_pod_cidrs_of_one_family_leave_the_other_open_to_all(helm: Helm) -> None:
    rule = webhook_rule(helm.template({"networkPolicy.podCIDRs": ["10.244.0.0/16"]}))
    assert rule["from"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
                            {"ipBlock": {"cidr": "::/0"}}]


def test_webhook_from_wins_over_pod_cidrs(helm: Helm) -> None:
    peers = [{"ipBlock": {"cidr": "172.16.0.10/32"}}]
    rule = webhook_rule(helm.template({"networkPolicy.webhookFrom": peers,
                                       "networkPolicy.podCIDRs": ["10.244.0.0/16"]}))
    assert rule["from"] == peers


def test_turning_it_off_is_warned_about(helm: Helm) -> None:
    values = {"networkPolicy.enabled": False}
    assert not by_kind(helm.template(values), "NetworkPolicy")
    assert "networkPolicy.enabled is false" in helm.notes(values)


@pytest.mark.parametrize("cidr", ["10.244.0.0", "pods", "10.244.0.0/16; drop"])
def test_pod_cidrs_must_be_cidrs(helm: Helm, cidr: str) -> None:
    with pytest.raises(HelmError, match="podCIDRs"):
        helm.template({"networkPolicy.podCIDRs": [cidr]})
