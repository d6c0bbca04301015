"""Kubeconfig files as kubectl takes them: the client library reads and merges them; this
module chooses the files, checks them and the context, and adds what the library lacks.

kubernetes_asyncio's `KubeConfigMerger` reads the files and merges them (the first file
that names a cluster, user or context wins for that name; each entry keeps its file's
path), and its `KubeConfigLoader` (`configure`) makes the connection of a context,
reading a relative `certificate-authority` or `tokenFile` from the file that names it.
Left here, where the library does otherwise than kubectl, or nothing:

- Which files: `--kubeconfig PATH` alone when given (it must exist); else the files of
  `$KUBECONFIG` (an `os.pathsep`-separated list) that exist, as kubectl skips missing
  ones; else `~/.kube/config`. An empty file is an empty kubeconfig, as in kubectl (the
  library fails on it). A `--kubeconfig` path containing `os.pathsep` is refused: the
  library's merger would split it into several files (kubectl reads it as one).
- `current-context`: the first file that sets it wins (in the library the last does).
- A user's relative `client-certificate` and `client-key`, and an exec plugin's relative
  `command` with a directory part, relative to the user's file (the library reads the
  first two from the cluster's file's directory and runs the command from the working
  directory).
- Errors naming the file and the field (`errors.ConfigError`): a missing file, a file
  that is not a kubeconfig, no current context, an unknown context (with the contexts
  there are), and, in `require_cluster`, a context naming no cluster with a server.
- The context's namespace: `-n`'s default, as in kubectl.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from admission.kube import errors

if TYPE_CHECKING:
    from kubernetes_asyncio.config.kube_config import ConfigNode, KubeConfigMerger

#: The named lists of a kubeconfig, and the key of an entry's body in each.
_BODY = {"clusters": "cluster", "users": "user", "contexts": "context"}
#: A user's file paths that the library resolves against the cluster's file.
_USER_PATHS = ("client-certificate", "client-key")


@dataclasses.dataclass(frozen=True)
class Loaded:
    config: ConfigNode  # the library's merged kubeconfig; each entry knows its file
    context: str  # the context in use
    namespace: str | None  # that context's namespace
    where: str  # the files, for messages: "kubeconfig PATH" or "the kubeconfig (A:B)"

    def entry(self, list_name: str, name: str) -> Mapping[str, Any] | None:
        """The body of the named cluster, user or context, or None."""
        node = self.config[list_name].get_with_name(name, safe=True)
        body = node.safe_get(_BODY[list_name]) if node is not None else None
        return body if isinstance(body, Mapping) else None


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


def _problem(doc: Any) -> str | None:
    """What makes a parsed file no kubeconfig, naming the field; None when it is one."""
    if not isinstance(doc, Mapping):
        return f"not a kubeconfig (a {type(doc).__name__}, not a mapping)"
    for list_name, body_key in _BODY.items():
        entries = doc.get(list_name)
        if entries is not None and not isinstance(entries, list):
            return f"{list_name}: not a list"
        for i, entry in enumerate(entries or []):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if not isinstance(name, str) or not name:
                return f"{list_name}[{i}].name: missing"
            if not isinstance(entry.get(body_key) or {}, Mapping):
                return f"{list_name}[{i}].{body_key}: not a mapping"
    return None


def _why(path: pathlib.Path, exc: Exception) -> str | None:
    """Why the library could not read `path` (None: it is empty, an empty kubeconfig)."""
    import yaml

    if isinstance(exc, UnicodeDecodeError):
        return "not a kubeconfig (not UTF-8 text)"
    if isinstance(exc, OSError):
        return f"cannot read it: {exc.strerror or exc}"
    if isinstance(exc, (yaml.YAMLError, RecursionError)):
        mark = getattr(exc, "problem_mark", None)
        return "not YAML" + (f" (line {mark.line + 1})" if mark is not None else "")
    # The library read the YAML and choked on its shape: read it again to name the field.
    try:
        doc = yaml.safe_load(path.read_text())
    except Exception:  # changed since the library read it
        return f"not a kubeconfig ({exc})"
    return None if doc is None else _problem(doc) or f"not a kubeconfig ({exc})"


def _merge(paths: list[pathlib.Path]) -> KubeConfigMerger | None:
    """The library's merge of the files, first file first; None when all are empty."""
    from kubernetes_asyncio.config.kube_config import KubeConfigMerger

    merger: KubeConfigMerger | None = None
    for path in paths:
        try:
            if merger is None:
                merger = KubeConfigMerger(str(path))
            else:
                merger.load_config(str(path))
        except Exception as exc:  # what the library's reading raises on a bad file
            problem = _why(path, exc)
            if problem is None:
                continue
            raise errors.ConfigError(f"{path}: {problem}") from None
        problem = _problem(merger.config_files[str(path)])
        if problem is not None:
            raise errors.ConfigError(f"{path}: {problem}")
    return merger


def _current_context(merger: KubeConfigMerger) -> str | None:
    """kubectl's current-context: the first file's that sets one."""
    return next((str(doc["current-context"]) for doc in merger.config_files.values()
                 if doc.get("current-context")), None)


def _resolve_user_paths(config: ConfigNode) -> None:
    """Make each user's relative certificate, key and exec command (with a directory
    part) absolute against the user's own file, as kubectl does (module docstring)."""
    for node in config.value["users"]:
        body = node.value.get("user")
        if not isinstance(body, dict) or node.path is None:
            continue
        base = os.path.abspath(os.path.dirname(node.path))
        for field in _USER_PATHS:
            value = body.get(field)
            if isinstance(value, str) and value and not os.path.isabs(value):
                body[field] = os.path.join(base, value)
        plugin = body.get("exec")
        if not isinstance(plugin, dict):
            continue
        command = plugin.get("command")
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            body["exec"] = {**plugin, "command": os.path.join(base, command)}


def load(kubeconfig: str | None = None, context: str | None = None,
         env: Mapping[str, str] | None = None) -> Loaded:
    """The merged kubeconfig and the context in use; raises `errors.ConfigError`."""
    where = describe(kubeconfig, env)
    if kubeconfig and os.pathsep in kubeconfig:
        raise errors.ConfigError(f"cannot use {where}: a file name with {os.pathsep!r} is "
                                 "not supported (the client library splits it as a list)")
    present = [p for p in files(kubeconfig, env) if p.exists()]
    if not present:
        raise errors.ConfigError(f"cannot use {where}: no such file")
    try:
        merger = _merge(present)
    except errors.ConfigError as exc:
        detail = str(exc)
        if len(present) == 1:  # the file is named once
            detail = detail.removeprefix(f"{present[0]}: ")
        raise errors.ConfigError(f"cannot use {where}: {detail}") from None
    current = _current_context(merger) if merger is not None else None
    name = context or current
    if not name:
        raise errors.ConfigError(f"cannot use {where}: no current-context, and no "
                                 "--context given")
    config = merger.config if merger is not None else None
    ctx = config["contexts"].get_with_name(name, safe=True) if config is not None else None
    if config is None or ctx is None:
        known = ", ".join(c.value["name"] for c in config.value["contexts"]) if config else ""
        raise errors.ConfigError(f"cannot use {where}: no context {name!r} "
                                 f"(contexts: {known or 'none'})")
    if current:  # the library's merge holds the last file's
        config.value["current-context"] = current
    else:
        config.value.pop("current-context", None)
    _resolve_user_paths(config)
    body = ctx.safe_get("context")
    if not isinstance(body, Mapping):
        raise errors.ConfigError(f"cannot use {where}: context {name!r}: no context body")
    namespace = body.get("namespace")
    return Loaded(config, name, str(namespace) if namespace else None, where)


def require_cluster(loaded: Loaded) -> None:
    """Raise `errors.ConfigError` unless the context names a cluster with a server."""
    cluster = (loaded.entry("contexts", loaded.context) or {}).get("cluster")
    body = loaded.entry("clusters", cluster) if isinstance(cluster, str) else None
    if body is None:
        raise errors.ConfigError(f"cannot use {loaded.where}: context {loaded.context!r}: "
                                 f"cluster {cluster!r} is not in the kubeconfig")
    server = body.get("server")
    if not isinstance(server, str) or not server:
        raise errors.ConfigError(f"cannot use {loaded.where}: cluster {cluster!r}: "
                                 "no server")


async def configure(loaded: Loaded, configuration: Any) -> None:
    """Set the library's client `configuration` from the loaded context (the library's
    `KubeConfigLoader`: server, TLS files, token, exec plugin)."""
    from kubernetes_asyncio.config.kube_config import KubeConfigLoader

    loader = KubeConfigLoader(loaded.config, active_context=loaded.context,
                              config_base_path=None)
    await loader.load_and_set(configuration)
