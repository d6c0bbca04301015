"""Kubeconfig files read and merged as kubectl reads them (`admission.kube.kubeconfig`):
$KUBECONFIG's list with the first file winning per name and for current-context, missing
files skipped, --kubeconfig alone when given, relative paths relative to their file, and a
clear ConfigError for what kubectl would refuse."""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any

import pytest
import yaml

from admission.kube import errors, kubeconfig


def write(path: pathlib.Path, current: str | None = None, *,
          contexts: dict[str, dict[str, Any]] | None = None,
          clusters: dict[str, dict[str, Any]] | None = None,
          users: dict[str, dict[str, Any]] | None = None) -> pathlib.Path:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if current:
        doc["current-context"] = current
    for key, body, entries in (("contexts", "context", contexts),
                               ("clusters", "cluster", clusters),
                               ("users", "user", users)):
        if entries is not None:
            doc[key] = [{"name": n, body: b} for n, b in entries.items()]
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def two(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    (tmp_path / "a").mkdir()
    first = write(tmp_path / "a" / "config", "dev",
                  contexts={"dev": {"cluster": "c1", "user": "u", "namespace": "team-a"}},
                  clusters={"c1": {"server": "https://127.0.0.1:1",
                                   "certificate-authority": "ca.pem"}},
                  users={"u": {"client-certificate": "/abs/cert.pem",
                               "client-key": "keys/key.pem",
                               "exec": {"command": "./bin/login", "apiVersion": "x"}}})
    second = write(tmp_path / "second", "prod",
                   contexts={"dev": {"cluster": "c2", "namespace": "other"},
                             "prod": {"cluster": "c2", "namespace": "team-p"}},
                   clusters={"c1": {"server": "https://shadowed:1"},
                             "c2": {"server": "https://127.0.0.1:2"}})
    return first, second


def env_of(*paths: pathlib.Path | str) -> dict[str, str]:
    return {"KUBECONFIG": os.pathsep.join(str(p) for p in paths)}


def test_the_first_file_wins_per_name_and_for_current_context(
        two: tuple[pathlib.Path, pathlib.Path]) -> None:
    first, second = two
    loaded = kubeconfig.load(env=env_of(first, second))
    assert loaded.context == "dev" and loaded.namespace == "team-a"
    clusters = {c["name"]: c["cluster"] for c in loaded.config["clusters"]}
    assert clusters["c1"]["server"] == "https://127.0.0.1:1"  # not the second file's
    assert set(clusters) == {"c1", "c2"}
    # The other order: the second file's current-context and its "dev" win.
    loaded = kubeconfig.load(env=env_of(second, first))
    assert (loaded.context, loaded.namespace) == ("prod", "team-p")
    assert kubeconfig.load(context="dev", env=env_of(second, first)).namespace == "other"


def test_a_context_from_any_file_and_missing_files_skipped(
        two: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path) -> None:
    first, second = two
    loaded = kubeconfig.load(context="prod",
                             env=env_of(tmp_path / "missing", first, "", second))
    assert (loaded.context, loaded.namespace) == ("prod", "team-p")


def test_kubeconfig_flag_alone_wins_over_the_environment(
        two: tuple[pathlib.Path, pathlib.Path]) -> None:
    first, second = two
    loaded = kubeconfig.load(str(second), env=env_of(first))
    assert loaded.context == "prod" and loaded.where == f"kubeconfig {second}"
    with pytest.raises(errors.ConfigError, match="no context 'dev2' "
                                                 r"\(contexts: dev, prod\)"):
        kubeconfig.load(str(second), "dev2", env=env_of(first))


def test_relative_paths_are_relative_to_their_file(
        two: tuple[pathlib.Path, pathlib.Path]) -> None:
    first, second = two
    loaded = kubeconfig.load(env=env_of(first, second))
    base = first.resolve().parent
    (cluster,) = [c["cluster"] for c in loaded.config["clusters"] if c["name"] == "c1"]
    (user,) = [u["user"] for u in loaded.config["users"]]
    assert cluster["certificate-authority"] == str(base / "ca.pem")
    assert user["client-certificate"] == "/abs/cert.pem"
    assert user["client-key"] == str(base / "keys" / "key.pem")
    assert user["exec"]["command"] == str(base / "bin" / "login")


BAD = [
    ("a list", "- 1\n", "not a kubeconfig (a list, not a mapping)"),
    ("not yaml", "clusters: [\n", "not YAML"),
    ("contexts not a list", "current-context: a\ncontexts: 7\n", "contexts: not a list"),
    ("unnamed context", "contexts: [{context: {}}]\n", "contexts[0].name: missing"),
    ("user not a map", "users: [{name: u, user: [1]}]\n", "users[0].user: not a mapping"),
    ("no current context", "contexts: []\n", "no current-context, and no --context"),
    ("unknown context", "current-context: x\ncontexts: [{name: a, context: {}}]\n",
     "no context 'x' (contexts: a)"),
]


@pytest.mark.parametrize(("content", "message"), [(b[1], b[2]) for b in BAD],
                         ids=[b[0] for b in BAD])
def test_what_kubectl_refuses_is_a_config_error_naming_the_file(
        tmp_path: pathlib.Path, content: str, message: str) -> None:
    path = tmp_path / "config"
    path.write_text(content)
    with pytest.raises(errors.ConfigError, match=re.escape(message)) as caught:
        kubeconfig.load(str(path), env={})
    assert str(caught.value).startswith(f"cannot use kubeconfig {path}")


def test_no_file_at_all(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(errors.ConfigError,
                       match=r"cannot use the kubeconfig \(~/.kube/config\): no such file"):
        kubeconfig.load(env={})
    with pytest.raises(errors.ConfigError, match="no such file"):
        kubeconfig.load(env=env_of(tmp_path / "x", tmp_path / "y"))


def test_a_context_needs_a_cluster_with_a_server(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "config", "a", contexts={"a": {"cluster": "c"}},
                 clusters={"d": {"server": "https://127.0.0.1:1"}})
    loaded = kubeconfig.load(str(path), env={})
    with pytest.raises(errors.ConfigError, match="cluster 'c' is not in the kubeconfig"):
        kubeconfig.require_cluster(loaded)
    path = write(tmp_path / "config", "a", contexts={"a": {"cluster": "c"}},
                 clusters={"c": {}})
    with pytest.raises(errors.ConfigError, match="cluster 'c': no server"):
        kubeconfig.require_cluster(kubeconfig.load(str(path), env={}))
