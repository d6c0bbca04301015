"""The CLI's entry points on hostile input (issue #20 item 12): `fitgate explain` with a
missing, empty, binary or malformed kubeconfig or none at all; a ProvisioningRequest whose
attempt label is not a number; a gate explanation that is not an object; and, property
based (hypothesis, bounded), generated kubeconfigs, labels, annotations and `fitgate fit`
documents. Each gets an answer or a clean error naming the object and field: never a
traceback, and output of bounded size."""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission import constants as c
from admission.app import cli
from admission.gate import predicates as gating
from admission.kube import kinds
from tests.admission import builders as ab
from tests.admission.app.test_diagnose import NO_QUOTA, QUOTA, Cluster, cond

#: Output of one command, at most (a message, not a dump of the input).
MAX_OUTPUT = 64 * 1024


def bounded(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    """No kubeconfig anywhere and not in a pod: $HOME is empty, $KUBECONFIG unset."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def explain_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["explain", "job/train", "-n", "team-a", "--no-fit", *args])
    out, err = capsys.readouterr()
    assert len(out) + len(err) < MAX_OUTPUT
    assert "Traceback" not in out + err
    return code, out, err


KUBECONFIGS = [
    ("empty", b""),
    ("binary", bytes(range(256)) * 4),
    ("not yaml", b"clusters: [\n  - {name: a\n"),
    ("a list", b"- 1\n- 2\n"),
    ("a string", b"just text\n"),
    ("no current context", b"apiVersion: v1\nkind: Config\nclusters: []\n"),
    ("contexts not a list", b"current-context: a\ncontexts: 7\n"),
    ("context without cluster", yaml.safe_dump({
        "current-context": "a", "contexts": [{"name": "a", "context": {"user": "u"}}],
        "users": [{"name": "u", "user": {}}]}).encode()),
    ("cluster without server", yaml.safe_dump({
        "current-context": "a", "contexts": [{"name": "a", "context": {
            "cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {}}], "users": [{"name": "u", "user": {}}]})
     .encode()),
    ("user not a map", yaml.safe_dump({
        "current-context": "a", "contexts": [{"name": "a", "context": {
            "cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": [1]}]}).encode()),
]


@pytest.mark.parametrize("content", [k[1] for k in KUBECONFIGS], ids=[k[0] for k in KUBECONFIGS])
def test_explain_with_a_bad_kubeconfig_says_so(capsys: pytest.CaptureFixture[str],
                                               no_cluster: pathlib.Path,
                                               content: bytes) -> None:
    path = no_cluster / "kubeconfig"
    path.write_bytes(content)
    code, _, err = explain_cli(capsys, "--kubeconfig", str(path))
    assert code == cli.EXIT_KUBECONFIG
    assert err.startswith("fitgate explain: ") and err.count("\n") == 1, err


def test_explain_with_a_missing_kubeconfig_names_it(capsys: pytest.CaptureFixture[str],
                                                    no_cluster: pathlib.Path) -> None:
    missing = no_cluster / "nope"
    code, _, err = explain_cli(capsys, "--kubeconfig", str(missing))
    assert code == cli.EXIT_KUBECONFIG and f"cannot use kubeconfig {missing}" in err, err


def test_explain_without_any_kubeconfig_says_so(capsys: pytest.CaptureFixture[str],
                                                no_cluster: pathlib.Path) -> None:
    code, _, err = explain_cli(capsys)
    assert code == cli.EXIT_KUBECONFIG and "cannot use the kubeconfig (~/.kube/config)" \
        in err, err


@bounded(25)
@given(content=st.one_of(st.binary(max_size=300),
                         st.text(max_size=200).map(str.encode),
                         st.recursive(st.one_of(st.none(), st.booleans(), st.integers(),
                                                st.text(max_size=8)),
                                      lambda inner: st.one_of(
                                          st.lists(inner, max_size=3),
                                          st.dictionaries(st.sampled_from(
                                              ["current-context", "contexts", "clusters",
                                               "users", "name", "context", "cluster", "user",
                                               "server", "token"]), inner, max_size=4)),
                                      max_leaves=12).map(
                             lambda v: yaml.safe_dump(v).encode())))
def test_explain_with_any_kubeconfig_answers_cleanly(capsys: pytest.CaptureFixture[str],
                                                     content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        mp.setenv("HOME", tmp)
        path = pathlib.Path(tmp) / "kubeconfig"
        path.write_bytes(content)
        code, _, err = explain_cli(capsys, "--kubeconfig", str(path))
    assert code == cli.EXIT_KUBECONFIG and err.startswith("fitgate explain: "), err


# ------------------------------------------------- what explain reads from the cluster


def run(k: Cluster, capsys: pytest.CaptureFixture[str], output: str = "text"
        ) -> tuple[int, str]:
    async def connect(kubeconfig: str | None, context: str | None) -> Any:
        return k.api

    args = argparse.Namespace(target="job/train", namespace=ab.NS, output=output,
                              kubeconfig=None, context=None, no_fit=False)
    code = cli.run_explain(args, connect)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and len(out) + len(err) < MAX_OUTPUT
    return code, out


def with_attempt(k: Cluster, label: Any) -> Cluster:
    k.with_workload(QUOTA, check="Pending").with_request(cond(c.ACCEPTED))
    (request,) = k.api.objects(kinds.PROVISIONING_REQUEST)
    request["metadata"]["labels"][c.ATTEMPT_LABEL] = label
    k.api.seed(kinds.PROVISIONING_REQUEST, request)
    return k


def test_an_attempt_label_that_is_not_a_number_is_reported(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(with_attempt(Cluster(), "x"), capsys, "json")
    report = json.loads(out)
    assert code == 0 and report["provisioningRequest"]["attempt"] is None
    assert any(f"metadata.labels['{c.ATTEMPT_LABEL}']: 'x' is not an attempt number" in p
               for p in report["problems"]), report["problems"]
    code, out = run(with_attempt(Cluster(), "x"), capsys)
    assert code == 0 and "(attempt unknown)" in out


def with_explanation(k: Cluster, raw: str) -> Cluster:
    job = k.api.objects(kinds.JOB)[0]
    job["metadata"].setdefault("annotations", {})[gating.EXPLANATION] = raw
    job["metadata"]["annotations"][gating.GATED_BY] = gating.GATE
    k.api.seed(kinds.JOB, job)
    return k


@pytest.mark.parametrize("raw", ["[1]", "1", "null", '"text"', "{", "[" * 5000])
def test_a_gate_explanation_that_is_not_an_object_is_left_out(
        capsys: pytest.CaptureFixture[str], raw: str) -> None:
    k = with_explanation(Cluster(), raw)
    k.with_workload(NO_QUOTA)
    for output in ("text", "json"):
        code, _ = run(k, capsys, output)
        assert code == 0


labels = st.one_of(st.text(max_size=12), st.integers(-10, 10**12).map(str),
                   st.sampled_from(["", "0", "01", "٣", "1e3", " 1", "-1", "9" * 40]))
annotations = st.one_of(st.text(max_size=40),
                        st.recursive(st.one_of(st.none(), st.booleans(), st.integers(),
                                               st.floats(allow_nan=False),
                                               st.text(max_size=8)),
                                     lambda inner: st.one_of(
                                         st.lists(inner, max_size=3),
                                         st.dictionaries(st.sampled_from(
                                             ["category", "policyViolation", "evaluatedAt",
                                              "verdict", "reasons", "x"]), inner,
                                             max_size=4)),
                                     max_leaves=10).map(json.dumps))


@bounded(40)
@given(label=labels, explanation=annotations)
def test_explain_answers_whatever_the_label_and_annotation(
        capsys: pytest.CaptureFixture[str], label: str, explanation: str) -> None:
    k = with_attempt(with_explanation(Cluster(), explanation), label)
    for output in ("text", "json"):
        code, out = run(k, capsys, output)
        assert code == 0 and out


# ------------------------------------------------------------------ fitgate fit

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False), st.text(max_size=10),
                    st.sampled_from(["1e10000", "1Gi", "Job", "Node", "v1", "batch/v1",
                                     "kueue.x-k8s.io/v1beta2", "resource.k8s.io/v1"]))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata", "name", "spec",
                                     "status", "podSets", "template", "containers",
                                     "resources", "requests", "count", "parallelism",
                                     "devices", "allocatable", "x"]), inner, max_size=5)),
    max_leaves=20)


@bounded(40)
@given(inventory=st.lists(documents, max_size=3), job=documents)
def test_fit_answers_or_names_the_field(capsys: pytest.CaptureFixture[str],
                                        inventory: list[Any], job: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        inv = pathlib.Path(tmp) / "inventory.yaml"
        inv.write_text(yaml.safe_dump_all(inventory))
        wl = pathlib.Path(tmp) / "workload.yaml"
        wl.write_text(yaml.safe_dump(job))
        code = cli.main(["fit", "--inventory", str(inv), "--workload", str(wl)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and len(out) + len(err) < MAX_OUTPUT
    assert code in (0, 1, cli.EXIT_BAD_INPUT)
    if code == cli.EXIT_BAD_INPUT:
        assert err.strip(), "a refusal says why"


def test_serve_with_a_bad_kubeconfig_says_so(capsys: pytest.CaptureFixture[str],
                                             no_cluster: pathlib.Path) -> None:
    path = no_cluster / "kubeconfig"
    path.write_bytes(b"- not a kubeconfig\n")
    code = cli.main(["serve", "--kubeconfig", str(path), "--health-port", "0"])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    assert f"fitgate serve: cannot use kubeconfig {path}" in err, err
