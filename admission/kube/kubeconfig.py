"""Kubeconfig files read as kubectl reads them, before any client is made.

Which files: `--kubeconfig PATH` alone when given (it must exist); else every file of
`$KUBECONFIG` (a `os.pathsep`-separated list; files that do not exist are skipped, as
kubectl skips them); else `~/.kube/config`. Several files merge as kubectl merges them:
the first file that names a cluster, user or context wins for that name, and the first
file that sets `current-context` wins. A relative file path inside an entry
(`certificate-authority`, `client-certificate`, `client-key`, `tokenFile`, an exec
plugin's `command` with a directory part) is relative to the file that holds the entry.

`load` returns the merged configuration, the context chosen (`--context`, else the
current context) and that context's namespace, the default of `-n` as in kubectl. Every
problem is an `errors.ConfigError` whose message names the file and the field: a missing
file, a file that is not a kubeconfig, no current context, an unknown context (with the
contexts there are); `require_cluster` adds a context naming no cluster with a server.
The client library then only turns the checked configuration into a connection
(`client.ApiClient.connect`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from admission.kube import errors

#: The named lists of a kubeconfig, merged by name.
_LISTS = ("clusters", "users", "contexts")
#: Per list: the key of an entry's body.
_BODY = {"clusters": "cluster", "users": "user", "contexts": "context"}
#: Per list: the entry's body key and the file paths in that body.
_PATH_FIELDS = {"clusters": ("cluster", ("certificate-authority",)),
                "users": ("user", ("client-certificate", "client-key", "tokenFile"))}


@dataclasses.dataclass(frozen=True)
class Loaded:
    config: dict[str, Any]  # the merged kubeconfig, file paths made absolute
    context: str  # the context in use
    namespace: str | None  # that context's namespace
    where: str  # the files, for messages: "kubeconfig PATH" or "the kubeconfig (A:B)"


def files(kubeconfig: str | None, env: Mapping[str, str] | None = None) -> list[pathlib.Path]:
    """The files to read, in precedence order (see the module docstring)."""
    env = os.environ if env is None else env
    if kubeconfig:
        return [pathlib.Path(kubeconfig).expanduser()]
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return [pathlib.Path(p).expanduser() for p in listed]
    return [pathlib.Path.home() / ".kube" / "config"]


def describe(kubeconfig: str | None, env: Mapping[str, str] | None = None) -> str:
    """How messages name the kubeconfig in use."""
    env = os.environ if env is None else env
    if kubeconfig:
        return f"kubeconfig {kubeconfig}"
    return f"the kubeconfig ({env.get('KUBECONFIG') or '~/.kube/config'})"


def _read(path: pathlib.Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise errors.ConfigError(f"{path}: not a kubeconfig (not UTF-8 text)") from None
    except OSError as exc:
        raise errors.ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise errors.ConfigError(f"{path}: not YAML{at}") from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise errors.ConfigError(f"{path}: not a kubeconfig (a {type(doc).__name__}, "
                                 "not a mapping)")
    return dict(doc)


def _absolute(entry: Mapping[str, Any], list_name: str, base: pathlib.Path
              ) -> dict[str, Any]:
    """`entry` with the relative file paths of its body made relative to `base`."""
    out = dict(entry)
    body_key, fields = _PATH_FIELDS.get(list_name, ("", ()))
    body = out.get(body_key)
    if not isinstance(body, Mapping):
        return out
    body = dict(body)
    for field in fields:
        value = body.get(field)
        if isinstance(value, str) and value and not os.path.isabs(value):
            body[field] = str(base / value)
    plugin = body.get("exec")
    if list_name == "users" and isinstance(plugin, Mapping):
        command = plugin.get("command")
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            body["exec"] = {**plugin, "command": str(base / command)}
    out[body_key] = body
    return out


def merge(docs: Sequence[tuple[pathlib.Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """kubectl's merge of kubeconfig files, first file first (module docstring)."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config",
                              **{name: [] for name in _LISTS}}
    seen: dict[str, set[str]] = {name: set() for name in _LISTS}
    for path, doc in docs:
        if doc.get("current-context") and "current-context" not in merged:
            merged["current-context"] = str(doc["current-context"])
        for list_name in _LISTS:
            entries = doc.get(list_name)
            if entries is None:
                continue
            if not isinstance(entries, list):
                raise errors.ConfigError(f"{path}: {list_name}: not a list")
            for i, entry in enumerate(entries):
                name = entry.get("name") if isinstance(entry, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise errors.ConfigError(f"{path}: {list_name}[{i}].name: missing")
                body_key = _BODY[list_name]
                if not isinstance(entry.get(body_key) or {}, Mapping):
                    raise errors.ConfigError(f"{path}: {list_name}[{i}].{body_key}: not a "
                                             "mapping")
                if name not in seen[list_name]:
                    seen[list_name].add(name)
                    merged[list_name].append(_absolute(entry, list_name,
                                                       path.resolve().parent))
    return merged


def _named(config: Mapping[str, Any], list_name: str, name: str) -> Mapping[str, Any] | None:
    entries: list[Mapping[str, Any]] = config.get(list_name) or []
    return next((e for e in entries if e.get("name") == name), None)


def load(kubeconfig: str | None = None, context: str | None = None,
         env: Mapping[str, str] | None = None) -> Loaded:
    """The merged kubeconfig and the context in use; raises `errors.ConfigError`."""
    paths = files(kubeconfig, env)
    where = describe(kubeconfig, env)
    if kubeconfig and not paths[0].exists():
        raise errors.ConfigError(f"cannot use {where}: no such file")
    present = [p for p in paths if p.exists()]
    if not present:
        raise errors.ConfigError(f"cannot use {where}: no such file")
    try:
        config = merge([(p, _read(p)) for p in present])
    except errors.ConfigError as exc:
        detail = str(exc)
        if len(present) == 1:  # the file is named once
            detail = detail.removeprefix(f"{present[0]}: ")
        raise errors.ConfigError(f"cannot use {where}: {detail}") from None
    name = context or config.get("current-context")
    if not name:
        raise errors.ConfigError(f"cannot use {where}: no current-context, and no "
                                 "--context given")
    ctx = _named(config, "contexts", name)
    if ctx is None:
        known = ", ".join(str(c.get("name")) for c in config["contexts"]) or "none"
        raise errors.ConfigError(f"cannot use {where}: no context {name!r} "
                                 f"(contexts: {known})")
    body = ctx.get("context")
    if not isinstance(body, Mapping):
        raise errors.ConfigError(f"cannot use {where}: context {name!r}: no context body")
    namespace = body.get("namespace")
    return Loaded(config, name, str(namespace) if namespace else None, where)


def require_cluster(loaded: Loaded) -> None:
    """Raise `errors.ConfigError` unless the context names a cluster with a server."""
    entry_ = _named(loaded.config, "contexts", loaded.context) or {}
    cluster = (entry_.get("context") or {}).get("cluster")
    entry = _named(loaded.config, "clusters", cluster) if isinstance(cluster, str) else None
    if entry is None:
        raise errors.ConfigError(f"cannot use {loaded.where}: context {loaded.context!r}: "
                                 f"cluster {cluster!r} is not in the kubeconfig")
    body = entry.get("cluster")
    server = body.get("server") if isinstance(body, Mapping) else None
    if not isinstance(server, str) or not server:
        raise errors.ConfigError(f"cannot use {loaded.where}: cluster {cluster!r}: "
                                 "no server")
