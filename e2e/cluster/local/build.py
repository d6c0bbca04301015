"""Build and cache the local control plane's binaries from Go modules.

There is no container engine on the machines fitgate is tested on, so kind cannot run;
there is Go and its module proxy. Every component is built from a small wrapper module
of ours under ``modules/<name>/`` (``go.mod`` + ``go.sum`` + a ``main.go`` where the
upstream main package is thin enough to import, otherwise a ``tool`` directive naming the
upstream main package). The wrapper pins exactly one upstream version.

Cache layout, all under ``$FITGATE_CACHE`` (default ``~/.cache/fitgate``), never in the
repository::

    go/mod/                 GOMODCACHE: module sources (also where CRDs and stages are read)
    go/build/               GOCACHE: compiled packages, shared by every wrapper
    bin/<name>/<key>/<name> one binary; <key> = version + hash of the wrapper module files,
                            the build flags and the Go version, so a change rebuilds it
    logs/build-<name>.log   the last build's output

A warm start finds every binary and builds nothing. A cold build runs the components one
after another (the machines have 2 cores; ``go build`` already uses both), prints progress
and the time of each, and the total.

The version strings the components report are set at link time (``-X``), as their own
release builds do: Kubernetes components report ``v1.36.3`` (Kueue parses the server
version and refuses the ``v0.0.0-master+$Format:%H$`` placeholder), Kueue ``v0.18.4``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

MODULES_DIR = pathlib.Path(__file__).resolve().parent / "modules"

KUBE_VERSION = "v1.36.3"
KUEUE_VERSION = "v0.18.4"
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.22.0"
# The module proxy serves no release of cluster-autoscaler; this pseudo-version (commit
# 1959f5f6 of kubernetes/autoscaler, June 2025) is the one it serves. Its own version
# constant says 1.33.0.
CA_VERSION = "v0.0.0-20250613073258-1959f5f61f6c"
CA_APIS_VERSION = "v0.0.0-20240830133931-adfbe7e45277"

# Build time stamp baked into the binaries: fixed, so that builds are reproducible.
BUILD_DATE = "2026-07-22T00:00:00Z"
BUILD_BUDGET_S = 80 * 60  # a single component's build never runs longer than this
PROGRESS_EVERY_S = 60  # a line of progress this often during a long build


def _kube_version_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags: list[str] = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitCommit=0000000000000000000000000000000000000000",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={BUILD_DATE}",
        ]
    return tuple(flags)


@dataclasses.dataclass(frozen=True)
class Component:
    """One binary: which wrapper module builds it, which package, and how."""

    name: str
    version: str
    package: str = "."  # "." = the wrapper's own main.go; else the upstream main package
    tags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # extra environment for this build only

    @property
    def module_dir(self) -> pathlib.Path:
        return MODULES_DIR / self.name


KUBE_TAGS = ("selinux", "notest")  # as Kubernetes' own hack/lib/golang.sh

COMPONENTS: tuple[Component, ...] = (
    Component("etcd", ETCD_VERSION),
    Component("kube-apiserver", KUBE_VERSION, tags=KUBE_TAGS,
              ldflags=_kube_version_ldflags(KUBE_VERSION)),
    Component("kube-controller-manager", KUBE_VERSION, tags=KUBE_TAGS,
              ldflags=_kube_version_ldflags(KUBE_VERSION)),
    Component("kube-scheduler", KUBE_VERSION, tags=KUBE_TAGS,
              ldflags=_kube_version_ldflags(KUBE_VERSION)),
    Component("kubectl", KUBE_VERSION, ldflags=_kube_version_ldflags(KUBE_VERSION)),
    Component("kwok", KWOK_VERSION, package="sigs.k8s.io/kwok/cmd/kwok",
              ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION.lstrip('v')}",)),
    Component("kueue", KUEUE_VERSION, package="sigs.k8s.io/kueue/cmd/kueue",
              ldflags=(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE_VERSION}",
                       f"-X sigs.k8s.io/kueue/pkg/version.BuildDate={BUILD_DATE}")),
    Component("cluster-autoscaler", CA_VERSION, package="k8s.io/autoscaler/cluster-autoscaler",
              tags=("kwok",),  # compiles in the kwok cloud provider only
              env=(("GONOSUMDB", "k8s.io/autoscaler/cluster-autoscaler"),)),
    Component("helm", HELM_VERSION, package="helm.sh/helm/v3/cmd/helm",
              ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",)),
)

BY_NAME = {c.name: c for c in COMPONENTS}


def cache_root() -> pathlib.Path:
    """``$FITGATE_CACHE``, or ``~/.cache/fitgate``."""
    root = os.environ.get("FITGATE_CACHE") or str(pathlib.Path.home() / ".cache" / "fitgate")
    return pathlib.Path(root).expanduser().resolve()


def go_env(extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The environment every Go command here runs with: caches under FITGATE_CACHE."""
    root = cache_root()
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "go" / "mod"),
        GOCACHE=str(root / "go" / "build"),
        GOWORK="off",
        GOTOOLCHAIN="local",  # never download a toolchain: only modules are reachable
        CGO_ENABLED="0",  # static binaries, as Kubernetes' own build
        GOFLAGS="-trimpath -mod=readonly -buildvcs=false",
    )
    env.update(dict(extra))
    return env


def _go_version() -> str:
    out = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.strip()


def cache_key(component: Component, go_version: str) -> str:
    """Version plus a hash of everything that decides the binary's content."""
    h = hashlib.sha256()
    for f in sorted(component.module_dir.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    h.update(json.dumps([component.package, component.tags, component.ldflags,
                         component.env, go_version]).encode())
    return f"{component.version}-{h.hexdigest()[:12]}"


def binary_path(component: Component, go_version: str | None = None) -> pathlib.Path:
    """Where the cached binary of ``component`` lives (it may not exist yet)."""
    key = cache_key(component, go_version or _go_version())
    return cache_root() / "bin" / component.name / key / component.name


def _log(msg: str) -> None:
    print(f"[fitgate-build] {msg}", file=sys.stderr, flush=True)


def build_one(component: Component, go_version: str) -> pathlib.Path:
    """Build ``component`` into the cache (atomically) and return the binary's path."""
    target = binary_path(component, go_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"build-{component.name}.log"
    tmp = target.with_name(f".{component.name}.tmp{os.getpid()}")
    ldflags = " ".join(("-s", "-w", *component.ldflags))
    cmd = ["go", "build", "-v", "-ldflags", ldflags, "-o", str(tmp)]
    if component.tags:
        cmd += ["-tags", ",".join(component.tags)]
    cmd.append(component.package)
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=component.module_dir, env=go_env(component.env),
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            # `go build -v` names each package it compiles: report that count as progress.
            while proc.poll() is None:
                elapsed = time.monotonic() - start
                if elapsed > BUILD_BUDGET_S:
                    proc.kill()
                    proc.wait(timeout=60)
                    raise RuntimeError(f"building {component.name} took over "
                                       f"{BUILD_BUDGET_S}s; log {log_path}")
                try:
                    proc.wait(timeout=PROGRESS_EVERY_S)
                except subprocess.TimeoutExpired:
                    done = len(log_path.read_text(errors="replace").splitlines()) - 1
                    _log(f"    {component.name}: {time.monotonic() - start:.0f}s, "
                         f"{done} packages compiled")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
    if proc.returncode != 0:
        tail = log_path.read_text().splitlines()[-30:]
        raise RuntimeError(f"building {component.name} failed (exit {proc.returncode}); "
                           f"log {log_path}:\n" + "\n".join(tail))
    tmp.rename(target)
    return target


def ensure(names: list[str] | None = None) -> dict[str, pathlib.Path]:
    """Make sure every binary (or those named) is in the cache; build what is missing.

    Returns name -> binary path. Prints progress and timings to stderr.
    """
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is not on PATH; it is needed to build the "
                           "local control plane (see e2e/cluster/local/README.md)")
    go_version = _go_version()
    wanted = [BY_NAME[n] for n in names] if names else list(COMPONENTS)
    paths = {c.name: binary_path(c, go_version) for c in wanted}
    missing = [c for c in wanted if not paths[c.name].exists()]
    if not missing:
        _log(f"warm: all {len(wanted)} binaries cached under {cache_root() / 'bin'}")
        return paths
    _log(f"cold: building {len(missing)} of {len(wanted)} binaries with {go_version} "
         f"(cache {cache_root()})")
    timings: dict[str, float] = {}
    total_start = time.monotonic()
    for i, component in enumerate(missing, 1):
        _log(f"[{i}/{len(missing)}] {component.name} {component.version} ...")
        start = time.monotonic()
        build_one(component, go_version)
        timings[component.name] = time.monotonic() - start
        _log(f"[{i}/{len(missing)}] {component.name} built in {timings[component.name]:.0f}s")
    total = time.monotonic() - total_start
    _log(f"cold build finished: {total:.0f}s in total "
         + ", ".join(f"{n} {t:.0f}s" for n, t in timings.items()))
    record = cache_root() / "logs" / "build-times.json"
    record.write_text(json.dumps({"go": go_version, "total_s": round(total, 1),
                                  "components_s": {k: round(v, 1) for k, v in timings.items()},
                                  "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime())}, indent=2))
    return paths


def module_source(module: str, version: str, via: str) -> pathlib.Path:
    """The directory of ``module@version`` in the module cache (downloaded if needed).

    ``via`` names the wrapper module whose go.sum vouches for it. CRDs, kwok stages and
    Kueue's webhook manifests are read from here at run time; none is committed.
    """
    component = BY_NAME[via]
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                          cwd=component.module_dir, env=go_env(component.env),
                          capture_output=True, text=True, timeout=600, check=False)
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module}@{version}: "
                           f"{info.get('Error') or proc.stderr.strip()}")
    return pathlib.Path(info["Dir"])
