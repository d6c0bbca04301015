"""Build and cache the local control plane's binaries from Go modules.

There is no container engine on the machines fitgate is tested on, so kind cannot run;
there is Go and its module proxy. Every component is built from a small wrapper module
of ours under ``modules/<name>/`` (``go.mod`` + ``go.sum`` + a ``main.go`` where the
upstream main package is thin enough to import, otherwise a ``tool`` directive naming the
upstream main package). The wrapper pins exactly one upstream version.

The Kubernetes components (kube-apiserver, kube-controller-manager, kube-scheduler,
kubectl) have one wrapper per supported minor, ``modules/kubernetes-<minor>/<name>/``.
``FITGATE_KUBE_VERSION`` (``1.37``, the default, or ``1.36``) picks the minor; the binaries
of both sit side by side in the cache (the version is part of the cache key), so
switching costs nothing once both are built. Every other component is the same for both.

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
release builds do: Kubernetes components report ``v1.37.2`` / ``v1.36.3`` (Kueue parses the server
version and refuses the ``v0.0.0-master+$Format:%H$`` placeholder), Kueue ``v0.19.2``.
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

# Kubernetes minor -> the k8s.io/kubernetes release its wrappers pin (staging modules at
# the matching v0.x.y). FITGATE_KUBE_VERSION selects one; DEFAULT_KUBE_MINOR otherwise.
KUBE_RELEASES = {"1.37": "v1.37.2", "1.36": "v1.36.3"}
DEFAULT_KUBE_MINOR = "1.37"
KUEUE_VERSION = "v0.19.2"
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v4.3.2"
# Prometheus v3.16.0, whose Go module is versioned v0.316.0; only promtool is built (the
# chart tests check the PrometheusRule with `promtool check rules` / `test rules`).
PROMETHEUS_VERSION = "v0.316.0"
# The offline kind cluster's node tools (e2e/cluster/kind); built only when asked for.
KIND_VERSION = "v0.33.0"
CRICTL_VERSION = "v1.37.0"
COREDNS_VERSION = "v1.15.0"
CONTAINERD_VERSION = "v2.4.2"
# The module proxy serves no release of cluster-autoscaler; this pseudo-version (commit
# 1959f5f6 of kubernetes/autoscaler, June 2025) is the one it serves. Its own version
# constant says 1.33.0.
CA_VERSION = "v0.0.0-20250613073258-1959f5f61f6c"
CA_APIS_VERSION = "v0.0.0-20240830133931-adfbe7e45277"
KARPENTER_VERSION = "v1.15.0"
# Karpenter v1.15 needs Go >= 1.26.9, newer than the local toolchain: its build alone lets
# the go command fetch this toolchain from the module proxy.
KARPENTER_TOOLCHAIN = "go1.27.3"

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
    module_subdir: str = ""  # "" = modules/<name>; else modules/<subdir>/<name>
    optional: bool = False  # built only when named: a test tool or an optional part, not
    # the default local control plane
    module: str = ""  # the wrapper's directory name when it is not <name> (several tools)

    @property
    def module_dir(self) -> pathlib.Path:
        return MODULES_DIR / self.module_subdir / (self.module or self.name)


KUBE_TAGS = ("selinux", "notest")  # as Kubernetes' own hack/lib/golang.sh

def kube_minor() -> str:
    """The Kubernetes minor to build and run: ``$FITGATE_KUBE_VERSION`` or the default."""
    minor = os.environ.get("FITGATE_KUBE_VERSION", "").strip().lstrip("v") or DEFAULT_KUBE_MINOR
    if minor not in KUBE_RELEASES:
        raise RuntimeError(f"FITGATE_KUBE_VERSION={minor!r}: supported are "
                           + ", ".join(sorted(KUBE_RELEASES)))
    return minor


def kube_version(minor: str | None = None) -> str:
    """The k8s.io/kubernetes release of ``minor`` (default: the selected one)."""
    return KUBE_RELEASES[minor or kube_minor()]


def components(minor: str | None = None) -> tuple[Component, ...]:
    """Every component, with the Kubernetes ones of ``minor`` (default: the selected one)."""
    minor = minor or kube_minor()
    version = KUBE_RELEASES[minor]
    subdir = f"kubernetes-{minor}"

    def kube(name: str, tags: tuple[str, ...] = KUBE_TAGS) -> Component:
        return Component(name, version, tags=tags, ldflags=_kube_version_ldflags(version),
                         module_subdir=subdir)

    return (
        Component("etcd", ETCD_VERSION),
        kube("kube-apiserver"),
        kube("kube-controller-manager"),
        kube("kube-scheduler"),
        kube("kubectl", tags=()),
        Component("kwok", KWOK_VERSION, package="sigs.k8s.io/kwok/cmd/kwok",
                  ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version="
                           f"{KWOK_VERSION.lstrip('v')}",)),
        Component("kueue", KUEUE_VERSION, package="sigs.k8s.io/kueue/cmd/kueue",
                  ldflags=(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE_VERSION}",
                           f"-X sigs.k8s.io/kueue/pkg/version.BuildDate={BUILD_DATE}")),
        Component("cluster-autoscaler", CA_VERSION,
                  package="k8s.io/autoscaler/cluster-autoscaler",
                  tags=("kwok",),  # compiles in the kwok cloud provider only
                  env=(("GONOSUMDB", "k8s.io/autoscaler/cluster-autoscaler"),)),
        Component("helm", HELM_VERSION, package="helm.sh/helm/v4/cmd/helm",
                  ldflags=(f"-X helm.sh/helm/v4/internal/version.version={HELM_VERSION}",)),
        Component("promtool", PROMETHEUS_VERSION,
                  package="github.com/prometheus/prometheus/cmd/promtool",
                  ldflags=("-X github.com/prometheus/common/version.Version=3.16.0",),
                  # remove_all_sd (Prometheus >= 3.10) leaves out every service-discovery
                  # plugin (cloud SDKs): promtool checks rule files, which need none.
                  tags=("remove_all_sd",), optional=True),
        # Karpenter with its kwok cloud provider: only clusters started with karpenter=True.
        Component("karpenter", KARPENTER_VERSION, package="sigs.k8s.io/karpenter/kwok",
                  env=(("GOTOOLCHAIN", KARPENTER_TOOLCHAIN),), optional=True),
    )


def kind_components(minor: str | None = None) -> tuple[Component, ...]:
    """The offline kind cluster's extra binaries (e2e/cluster/kind): node agent, node
    bootstrap, Service proxy, DNS, the CRI client and kind itself. Not part of the local
    control plane, so ``ensure()`` without names does not build them."""
    minor = minor or kube_minor()
    version = KUBE_RELEASES[minor]
    subdir = f"kubernetes-{minor}"

    def kube(name: str) -> Component:
        return Component(name, version, tags=KUBE_TAGS, ldflags=_kube_version_ldflags(version),
                         module_subdir=subdir)

    return (
        kube("kubelet"),
        kube("kubeadm"),
        kube("kube-proxy"),
        Component("kind", KIND_VERSION, package="sigs.k8s.io/kind"),
        Component("crictl", CRICTL_VERSION, package="sigs.k8s.io/cri-tools/cmd/crictl",
                  ldflags=(f"-X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",)),
        Component("coredns", COREDNS_VERSION),
        *(Component(name, CONTAINERD_VERSION, module="containerd",
                    package=f"github.com/containerd/containerd/v2/cmd/{name}",
                    tags=("no_btrfs", "no_devmapper", "no_zfs"),
                    ldflags=(f"-X github.com/containerd/containerd/v2/version.Version="
                             f"{CONTAINERD_VERSION}",))
          for name in ("containerd", "containerd-shim-runc-v2", "ctr")),
        # fitgate's own fake DRA kubelet plugin (modules/kind-dra-driver/main.go).
        Component("kind-dra-driver", version),
    )


def by_name(minor: str | None = None) -> dict[str, Component]:
    """name -> Component for ``minor`` (default: the selected one), kind's included."""
    return {c.name: c for c in (*components(minor), *kind_components(minor))}


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
    log_path = logs / f"build-{component.name}-{component.version}.log"
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


def ensure(names: list[str] | None = None, minor: str | None = None) -> dict[str, pathlib.Path]:
    """Make sure every binary of the local control plane (or those named, test tools
    included) is in the cache; build what is missing.

    ``minor`` picks the Kubernetes components (default: ``FITGATE_KUBE_VERSION`` or
    ``DEFAULT_KUBE_MINOR``). Returns name -> binary path. Prints progress and timings to
    stderr; a build that did something records them in ``logs/build-times-<minor>.json``
    (and ``logs/build-times.json``, the latest).
    """
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is not on PATH; it is needed to build the "
                           "local control plane (see e2e/cluster/local/README.md)")
    go_version = _go_version()
    minor = minor or kube_minor()
    every = by_name(minor)
    wanted = ([every[n] for n in names] if names
              else [c for c in components(minor) if not c.optional])
    paths = {c.name: binary_path(c, go_version) for c in wanted}
    missing = [c for c in wanted if not paths[c.name].exists()]
    if not missing:
        _log(f"warm: all {len(wanted)} binaries (Kubernetes {KUBE_RELEASES[minor]}) cached "
             f"under {cache_root() / 'bin'}")
        return paths
    _log(f"cold: building {len(missing)} of {len(wanted)} binaries (Kubernetes "
         f"{KUBE_RELEASES[minor]}) with {go_version} "
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
    toolchains = {c.name: dict(c.env)["GOTOOLCHAIN"] for c in missing
                  if "GOTOOLCHAIN" in dict(c.env)}  # built with another Go than `go`
    text = json.dumps({"go": go_version, **({"toolchains": toolchains} if toolchains else {}),
                       "kubernetes": KUBE_RELEASES[minor],
                       "total_s": round(total, 1),
                       "components_s": {k: round(v, 1) for k, v in timings.items()},
                       "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                       "nproc": os.cpu_count(),
                       "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                      indent=2)
    logs = cache_root() / "logs"
    if all(c.optional for c in missing):  # not the control plane's record
        (logs / f"build-times-{'-'.join(c.name for c in missing)}.json").write_text(text)
        return paths
    (logs / f"build-times-{minor}.json").write_text(text)
    (logs / "build-times.json").write_text(text)
    return paths


def module_source(module: str, version: str, via: str) -> pathlib.Path:
    """The directory of ``module@version`` in the module cache (downloaded if needed).

    ``via`` names the wrapper module whose go.sum vouches for it. CRDs, kwok stages and
    Kueue's webhook manifests are read from here at run time; none is committed.
    """
    component = by_name()[via]
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                          cwd=component.module_dir, env=go_env(component.env),
                          capture_output=True, text=True, timeout=600, check=False)
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module}@{version}: "
                           f"{info.get('Error') or proc.stderr.strip()}")
    return pathlib.Path(info["Dir"])
