"""`fitgate explain`'s way to the API server (issue #21 item 6): --kubeconfig, --context,
-n and $KUBECONFIG as kubectl takes them, and for each way it can fail (no usable
kubeconfig, an unknown context, a server that refuses the connection or never answers) one
line on stderr, its own exit code, no traceback, within a few seconds.

The connection tests make the real client (`ApiClient.connect`) against a loopback port:
one with nothing listening, one that accepts connections and never answers."""

from __future__ import annotations

import argparse
import os
import pathlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from admission.app import cli
from tests.admission import builders as ab
from tests.admission.app.test_diagnose import NO_QUOTA, Cluster


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def kubeconfig(path: pathlib.Path, server: str, *, namespace: str | None = "team-a",
               context: str = "dev") -> pathlib.Path:
    ctx: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "contexts": [{"name": context, "context": ctx}],
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return path


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    code = cli.main(["explain", "job/train", "--no-fit", *args])
    took = time.monotonic() - start
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err, took


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that completes TCP connections (the kernel's backlog) and never
    answers: a hung API server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"https://127.0.0.1:{s.getsockname()[1]}"


def test_connection_refused_is_one_line_and_exit_4(
        capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    path = kubeconfig(tmp_path / "config", server)
    code, out, err, took = explain(capsys, "--kubeconfig", str(path))
    assert code == cli.EXIT_UNREACHABLE == 4 and out == ""
    assert err.startswith(f"fitgate explain: the API server at {server} does not answer")
    assert err.count("\n") == 1 and took < 5, (err, took)


def test_a_server_that_never_answers_is_bounded_by_the_request_timeout(
        capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, silent_server: str
        ) -> None:
    path = kubeconfig(tmp_path / "config", silent_server)
    code, _, err, took = explain(capsys, "--kubeconfig", str(path), "--request-timeout", "1")
    assert code == cli.EXIT_UNREACHABLE
    assert "does not answer (within 1 s)" in err and err.count("\n") == 1, err
    assert took < 5, took


def test_an_unknown_context_names_the_ones_there_are(
        capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:1")
    code, out, err, _ = explain(capsys, "--kubeconfig", str(path), "--context", "prod")
    assert code == cli.EXIT_KUBECONFIG == 3 and out == ""
    assert err == (f"fitgate explain: cannot use kubeconfig {path}: no context 'prod' "
                   "(contexts: dev)\n")


def test_kubeconfig_env_list_unknown_context(capsys: pytest.CaptureFixture[str],
                                             tmp_path: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    a = kubeconfig(tmp_path / "a", "https://127.0.0.1:1", context="one")
    b = kubeconfig(tmp_path / "b", "https://127.0.0.1:1", context="two")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(a), str(b)]))
    code, _, err, _ = explain(capsys, "--context", "three")
    assert code == cli.EXIT_KUBECONFIG
    assert "no context 'three' (contexts: one, two)" in err, err


@pytest.mark.parametrize("flag", ["--request-timeout=0", "--request-timeout=x"])
def test_a_bad_request_timeout_is_a_usage_error(flag: str) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["explain", "job/train", flag])
    assert caught.value.code == 2


def connected(k: Cluster, seen: list[Any]) -> Any:
    async def connect(kubeconfig_: str | None, context: str | None) -> Any:
        seen.append((kubeconfig_, context))
        return k.api
    return connect


def args_of(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"target": "job/train", "namespace": None, "output": "json",
                                 "kubeconfig": None, "context": None, "no_fit": True, **kw})


def test_the_namespace_is_the_merged_current_contexts_and_n_overrides_it(
        capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    k = Cluster().with_workload(NO_QUOTA)  # its Job is in team-a
    first = kubeconfig(tmp_path / "first", "https://127.0.0.1:1", namespace=ab.NS)
    second = kubeconfig(tmp_path / "second", "https://127.0.0.1:1", namespace="elsewhere",
                        context="other")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    seen: list[Any] = []
    assert cli.run_explain(args_of(), connected(k, seen)) == 0
    assert '"namespace": "team-a"' in capsys.readouterr().out
    # The second file's context: its namespace, where there is no such job.
    assert cli.run_explain(args_of(context="other"), connected(k, seen)) == \
        cli.EXIT_NOT_FOUND
    assert "no Workload or Job elsewhere/train" in capsys.readouterr().err
    # -n wins over the context's namespace.
    assert cli.run_explain(args_of(context="other", namespace=ab.NS),
                           connected(k, seen)) == 0
    assert seen == [(None, None), (None, "other"), (None, "other")]
