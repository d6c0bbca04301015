"""The chart's PrometheusRule and Grafana dashboard (values metrics.prometheusRule,
metrics.dashboard), rendered by the real helm and checked with the real rule tooling:
promtool (built from Go modules into the cache like helm, `make helm-bin`) checks the
rules, and its rule unit tests show each alert firing on the series of a failure and
staying quiet on a healthy fitgate. Every metric the rules and the dashboard query is
one fitgate exports (admission.runtime.metrics, default registry)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
from collections.abc import Mapping
from typing import Any

import prometheus_client
import pytest
import yaml

from admission.app import serve  # serve: every module that defines a metric
from admission.runtime import metrics
from e2e.cluster.local import build
from tests.chart.conftest import NAMESPACE, Helm, by_kind, one

ENABLED = {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
                       "dashboard": {"enabled": True}}}
METRIC = re.compile(r"\b(fitgate_[a-z_]+)")


@pytest.fixture(scope="module")
def promtool() -> pathlib.Path:
    component = build.by_name()["promtool"]
    path = build.binary_path(component)
    if not path.exists():
        pytest.fail(f"promtool {component.version} is not built ({path} is missing): run "
                    "`make helm-bin`, which builds it from Go modules (a step of `make unit`)")
    return path


def run(promtool: pathlib.Path, *args: str, cwd: pathlib.Path) -> str:
    proc = subprocess.run([str(promtool), *args], capture_output=True, text=True,
                          timeout=120, check=False, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def exported() -> set[str]:
    """Every series name fitgate's default registry exposes (counters with _total,
    histograms with their _bucket, _sum and _count)."""
    names: set[str] = set()
    for family in prometheus_client.REGISTRY.collect():
        if not family.name.startswith("fitgate_"):
            continue
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def rules_of(helm: Helm, values: Mapping[str, Any] = ENABLED) -> dict[str, Any]:
    rule = one(helm.template(values), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prom"
    return {"groups": rule["spec"]["groups"]}


def alerts(rules: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def test_off_by_default(helm: Helm) -> None:
    objects = helm.template()
    assert by_kind(objects, "PrometheusRule") == []
    assert [c for c in by_kind(objects, "ConfigMap") if "fitgate.json" in c["data"]] == []


def test_promtool_checks_the_rules(helm: Helm, promtool: pathlib.Path,
                                   tmp_path: pathlib.Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules_of(helm)))
    out = run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert "SUCCESS: 4 rules found" in out


def test_promtool_refuses_a_broken_rule(promtool: pathlib.Path, tmp_path: pathlib.Path
                                        ) -> None:
    """The check is not vacuous: a PromQL typo fails it."""
    bad = {"groups": [{"name": "x", "rules": [{"alert": "A", "expr": "max(fitgate_leader"}]}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run([str(promtool), "check", "rules", "bad.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0


def test_the_rules_query_only_metrics_fitgate_exports(helm: Helm) -> None:
    queried = {m for r in alerts(rules_of(helm)).values() for m in METRIC.findall(r["expr"])}
    assert queried and queried <= exported(), queried - exported()


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    labels = {"namespace": NAMESPACE, "pod": "fitgate-0", **labels}
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{text}}}", "values": values}


# Each alert: series on which it fires (at the time given) and series on which it stays
# quiet for as long. Times are minutes from 0; one sample a minute.
DAY = 86400
CASES: dict[str, dict[str, Any]] = {
    "FitgateCheckPendingTooLong": {
        # provisioning.timeoutSeconds 1800, pendingFactor 2: over 3600 s for 10 min.
        "fire": [_series("fitgate_oldest_pending_check_seconds", "3000+60x40")],
        "quiet": [_series("fitgate_oldest_pending_check_seconds", "1700+0x40")],
        "at": "40m", "labels": {"severity": "warning"}, "value": "1h 30m 0s"},
    "FitgateNoLeader": {
        "fire": [_series("fitgate_leader", "1 1 1 0x20", pod="fitgate-0"),
                 _series("fitgate_leader", "0x23", pod="fitgate-1")],
        "quiet": [_series("fitgate_leader", "1 1 1 0x20", pod="fitgate-0"),
                  _series("fitgate_leader", "0 0 0 1x20", pod="fitgate-1")],
        "at": "20m", "labels": {"severity": "critical"}, "value": ""},
    "FitgateCertificateExpiring": {
        # time() is 0 at the start of a promtool test: expiry 3 days vs. 60 days out.
        "fire": [_series("fitgate_serving_certificate_expiry_timestamp_seconds",
                         f"{3 * DAY}+0x30")],
        "quiet": [_series("fitgate_serving_certificate_expiry_timestamp_seconds",
                          f"{60 * DAY}+0x30")],
        "at": "30m", "labels": {"severity": "warning"}, "value": "2d 23h 30m 0s"},
    "FitgateWebhookErrors": {
        # 30 reviews a minute; 9 of them failed (30 %) against none.
        "fire": [_series("fitgate_webhook_validations_total", "0+21x40", outcome="decided"),
                 _series("fitgate_webhook_validations_total", "0+9x40", outcome="failed")],
        "quiet": [_series("fitgate_webhook_validations_total", "0+30x40", outcome="decided"),
                  _series("fitgate_webhook_validations_total", "0+0x40", outcome="failed")],
        "at": "40m", "labels": {"severity": "warning"}, "value": "30%"},
}
VALUE = re.compile(r"\{\{ \$value \| \w+ \}\}")


def expected(rule: Mapping[str, Any], case: Mapping[str, Any]) -> dict[str, Any]:
    """The alert promtool must find: the rule's labels, and its annotations with $value
    expanded as Prometheus prints it (the case's `value`)."""
    return {"exp_labels": case["labels"],
            "exp_annotations": {k: VALUE.sub(case["value"], v)
                                for k, v in rule["annotations"].items()}}


def test_every_alert_has_a_firing_and_a_quiet_case(helm: Helm) -> None:
    assert set(alerts(rules_of(helm))) == set(CASES)


@pytest.mark.parametrize("alert", sorted(CASES))
def test_promtool_fires_each_alert_on_failure_and_not_on_health(
        helm: Helm, promtool: pathlib.Path, tmp_path: pathlib.Path, alert: str) -> None:
    rules = rules_of(helm)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    case = CASES[alert]
    # Every expression aggregates over the replicas: an alert carries only its own labels.
    tests = [
        {"interval": "1m", "input_series": case["fire"],
         "alert_rule_test": [{"eval_time": case["at"], "alertname": alert,
                              "exp_alerts": [expected(alerts(rules)[alert], case)]}]},
        {"interval": "1m", "input_series": case["quiet"],
         "alert_rule_test": [{"eval_time": case["at"], "alertname": alert,
                              "exp_alerts": []}]},
    ]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    out = run(promtool, "test", "rules", "test.yaml", cwd=tmp_path)
    assert "SUCCESS" in out


def test_no_leader_fires_when_no_replica_is_scraped(helm: Helm, promtool: pathlib.Path,
                                                    tmp_path: pathlib.Path) -> None:
    rules = rules_of(helm)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    want = expected(alerts(rules)["FitgateNoLeader"], CASES["FitgateNoLeader"])
    tests = [{"interval": "1m", "input_series": [
        _series("fitgate_leader", "1 1 1", pod="fitgate-0")],
        "alert_rule_test": [{"eval_time": "15m", "alertname": "FitgateNoLeader",
                             "exp_alerts": [want]}]}]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}))
    run(promtool, "test", "rules", "test.yaml", cwd=tmp_path)


def test_the_pending_threshold_follows_the_provisioning_deadline(helm: Helm) -> None:
    def expr(values: Mapping[str, Any]) -> str:
        merged = {**values, "metrics": ENABLED["metrics"]}
        return str(alerts(rules_of(helm, merged))["FitgateCheckPendingTooLong"]["expr"])
    assert expr({}).endswith("> 3600")
    assert expr({"provisioning": {"timeoutSeconds": 600}}).endswith("> 1200")
    assert expr({"provisioning": {"timeoutSeconds": 0}}).endswith("> 21600")


# ------------------------------------------------------------------ dashboard


def dashboard_of(helm: Helm) -> tuple[Mapping[str, Any], dict[str, Any]]:
    (cm,) = [c for c in by_kind(helm.template(ENABLED), "ConfigMap")
             if "fitgate.json" in c["data"]]
    return cm, json.loads(cm["data"]["fitgate.json"])


def _exprs(dashboard: Mapping[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_parses_and_is_labelled_for_the_sidecar(helm: Helm) -> None:
    cm, dashboard = dashboard_of(helm)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert dashboard["title"] == "fitgate" and len(dashboard["panels"]) >= 10


def test_the_dashboard_queries_only_metrics_fitgate_exports(helm: Helm) -> None:
    _, dashboard = dashboard_of(helm)
    queried = {m for e in _exprs(dashboard) for m in METRIC.findall(e)}
    assert queried <= exported(), queried - exported()
    # Every state gauge and counter of admission.runtime.metrics is on it.
    assert {"fitgate_checks_pending", "fitgate_leader", "fitgate_build_info",
            "fitgate_jobs_held_total", "fitgate_provisioning_requests_in_flight",
            "fitgate_serving_certificate_expiry_timestamp_seconds"} <= queried


def test_the_dashboards_queries_are_valid_promql(helm: Helm, promtool: pathlib.Path,
                                                  tmp_path: pathlib.Path) -> None:
    """promtool parses each query (as a recording rule; Grafana's own variables replaced
    by values of their type)."""
    _, dashboard = dashboard_of(helm)
    rules = [{"record": f"fitgate:panel_{i}",
              "expr": e.replace("$__rate_interval", "5m").replace("$namespace", NAMESPACE)}
             for i, e in enumerate(_exprs(dashboard))]
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "panels", "rules": rules}]}))
    out = run(promtool, "check", "rules", "panels.yaml", cwd=tmp_path)
    assert f"SUCCESS: {len(rules)} rules found" in out


def test_metrics_docstring_lists_every_metric() -> None:
    assert callable(serve.serve)  # imported: every module that registers a metric is loaded
    doc = metrics.__doc__ or ""
    families = {f.name for f in prometheus_client.REGISTRY.collect()
                if f.name.startswith("fitgate_")}
    listed = {m.removesuffix("_total") for m in METRIC.findall(doc)}
    assert families <= listed, families - listed
