"""Kubeconfig files read and merged as kubectl reads them (`admission.kube.kubeconfig`):
$KUBECONFIG's list with the first file winning per name and for current-context, missing
files skipped, --kubeconfig alone when given, relative paths relative to their file, and a
clear ConfigError for what kubectl would refuse."""

from __future__ import annotations

import asyncio
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
    assert (loaded.entry("clusters", "c1") or {})["server"] == "https://127.0.0.1:1"
    assert loaded.entry("clusters", "c2") is not None  # from the second file
    assert loaded.config["current-context"] == "dev"  # the library's merge says "prod"
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


def test_relative_paths_are_relative_to_their_file(tmp_path: pathlib.Path) -> None:
    """The cluster's CA, the user's certificate, key and token file, and the exec plugin's
    command, each relative to the file that names it, whatever the working directory: the
    library makes the connection settings, the exec plugin really runs."""
    (tmp_path / "a" / "keys").mkdir(parents=True)
    (tmp_path / "b" / "bin").mkdir(parents=True)
    for name in ("a/ca.pem", "b/cert.pem", "b/keys.pem", "b/token"):
        (tmp_path / name).write_text(name)
    login = tmp_path / "b" / "bin" / "login"
    login.write_text("#!/bin/sh\necho '{\"apiVersion\": \"x\", \"kind\": "
                     "\"ExecCredential\", \"status\": {\"token\": \"from-exec\"}}'\n")
    login.chmod(0o755)
    first = write(tmp_path / "a" / "config", "dev",
                  contexts={"dev": {"cluster": "c1", "user": "u"},
                            "tok": {"cluster": "c1", "user": "t"}},
                  clusters={"c1": {"server": "https://127.0.0.1:1",
                                   "certificate-authority": "ca.pem"}})
    second = write(tmp_path / "b" / "config",
                   users={"u": {"client-certificate": "cert.pem", "client-key": "keys.pem",
                                "exec": {"command": "./bin/login", "apiVersion": "x"}},
                          "t": {"tokenFile": "token"}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        cfg = configured(kubeconfig.load(env=env_of(first, second)))
        token = configured(kubeconfig.load(context="tok", env=env_of(first, second)))
    finally:
        os.chdir(cwd)
    assert cfg.ssl_ca_cert == str(tmp_path / "a" / "ca.pem")
    assert (cfg.cert_file, cfg.key_file) == (str(tmp_path / "b" / "cert.pem"),
                                             str(tmp_path / "b" / "keys.pem"))
    assert cfg.api_key["BearerToken"] == "Bearer from-exec"
    assert token.api_key["BearerToken"] == "Bearer b/token"


def configured(loaded: kubeconfig.Loaded) -> Any:
    from kubernetes_asyncio import client

    configuration = client.Configuration()
    asyncio.run(kubeconfig.configure(loaded, configuration))
    return configuration


def test_an_empty_file_is_an_empty_kubeconfig(
        two: tuple[pathlib.Path, pathlib.Path], tmp_path: pathlib.Path) -> None:
    _, second = two
    (tmp_path / "empty").write_text("")
    (tmp_path / "comment").write_text("# nothing\n")
    loaded = kubeconfig.load(env=env_of(tmp_path / "empty", tmp_path / "comment", second))
    assert (loaded.context, loaded.namespace) == ("prod", "team-p")
    with pytest.raises(errors.ConfigError, match="no current-context"):
        kubeconfig.load(str(tmp_path / "empty"), env={})
    with pytest.raises(errors.ConfigError, match=r"no context 'x' \(contexts: none\)"):
        kubeconfig.load(str(tmp_path / "comment"), "x", env={})


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


def test_a_kubeconfig_flag_with_a_path_separator_is_refused(tmp_path: pathlib.Path) -> None:
    """The library's merger splits its argument at os.pathsep; rather than read other
    files than the one named, such a name is refused."""
    path = write(tmp_path / f"a{os.pathsep}b", "a", contexts={"a": {"cluster": "c"}})
    with pytest.raises(errors.ConfigError, match=f"cannot use kubeconfig {re.escape(str(path))}:"
                       " a file name with"):
        kubeconfig.load(str(path), env={})
