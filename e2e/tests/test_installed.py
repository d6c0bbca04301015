"""fitgate as shipped: the wheel, installed into a clean virtual environment.

Every other test runs on the editable install, where a module reads its data files from
the source tree, so a file missing from the wheel goes unnoticed there. Here the module
fixture copies the files git knows (tracked and new, not ignored) to a scratch directory,
builds the wheel from that copy with pip (build isolation, as `pip install .` does),
creates a virtual environment outside the source tree and installs the wheel into it.
Then:

- the wheel holds every file the code opens at run time: the CLI runs `fit`, `verify`
  and `shape check` (which reads the NodeShape CRD shipped in `admission/app/`) on the
  bundled examples from the source tree under an audit hook that records
  each file opened inside `fitcore/` or `admission/`, and each must be in the wheel, as
  must every non-Python file git tracks in those packages;
- the installed commands run from a directory outside the source tree: `fitgate
  version`, `fitgate fit`, `fitgate verify` and `fitgate shape check` on the bundled
  examples,
  `kubectl-fitgate --help`;
- the installed `fitgate serve` starts against the local control plane and answers
  `/readyz` with 200.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e import harness

pytestmark = [pytest.mark.e2e]

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("fitcore", "admission")
EXAMPLES = REPO / "examples"
BUILD_TIMEOUT_S = 900


@dataclass(frozen=True)
class Installed:
    wheel: pathlib.Path
    venv: pathlib.Path
    outside: pathlib.Path  # a working directory outside the source tree

    def bin(self, name: str) -> pathlib.Path:
        return self.venv / "bin" / name

    def env(self) -> dict[str, str]:
        """The environment a user's shell gives the installed commands: no PYTHONPATH,
        no user site, the venv first on PATH."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONNOUSERSITE"] = "1"
        return env

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin(argv[0])), *argv[1:]], cwd=self.outside,
                              env=self.env(), capture_output=True, text=True, timeout=120,
                              check=False)


def _shipped_sources(dest: pathlib.Path) -> None:
    """Copy what a clone of this tree would hold (tracked and new files, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if not src.is_file():  # deleted in the work tree, not yet committed
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("installed")
    assert REPO not in root.parents, "the scratch directory must lie outside the source tree"
    src, dist, venv, outside = (root / "src", root / "dist", root / "venv", root / "work")
    outside.mkdir()
    _shipped_sources(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(dist), str(src)], check=True, timeout=BUILD_TIMEOUT_S)
    (wheel,) = dist.glob("fitgate-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    str(wheel)], check=True, timeout=BUILD_TIMEOUT_S, cwd=outside)
    yield Installed(wheel, venv, outside)


# The CLI run of the source tree under an audit hook: prints, as JSON, every file opened
# inside the packages' directories, and every module loaded from them.
_AUDITED_RUN = textwrap.dedent("""
    import json, os, sys
    roots = [os.path.realpath(p) + os.sep for p in sys.argv[1].split(os.pathsep)]
    opened = set()
    def hook(event, args):
        if event == "open" and isinstance(args[0], str):
            path = os.path.realpath(args[0])
            if any(path.startswith(r) for r in roots):
                opened.add(path)
    sys.addaudithook(hook)
    from admission.app import cli
    for argv in json.loads(sys.argv[2]):
        code = cli.main(argv)
        if code:
            sys.exit(f"fitgate {argv[0]} exited {code}")
    # Compiled extensions are loaded with dlopen, which raises no "open" event.
    for module in list(sys.modules.values()):
        path = os.path.realpath(getattr(module, "__file__", None) or os.devnull)
        if any(path.startswith(r) for r in roots):
            opened.add(path)
    print(json.dumps(sorted(opened)))
""")

_FIT = ["fit", "--inventory", str(EXAMPLES / "inventory"), "--shapes",
        str(EXAMPLES / "shapes"), "--workload", str(EXAMPLES / "workload.yaml")]
_VERIFY = ["verify", "--before", str(EXAMPLES / "inventory"),
           "--after", str(EXAMPLES / "inventory"),
           "--after", str(EXAMPLES / "verify" / "new-nodes.yaml"),
           "--shapes", str(EXAMPLES / "shapes"),
           "--workload", str(EXAMPLES / "workload.yaml")]
_SHAPE_CHECK = ["shape", "check", str(EXAMPLES / "shapes")]


def _opened_at_run_time() -> set[str]:
    """Files inside fitcore/ and admission/ that `fit`, `verify` and `shape check` open,
    relative to the repository (modules, compiled extensions, data files)."""
    roots = os.pathsep.join(str(REPO / p) for p in PACKAGES)
    out = subprocess.run([sys.executable, "-c", _AUDITED_RUN, roots,
                          json.dumps([_FIT, _VERIFY, _SHAPE_CHECK])], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    opened = json.loads(out.splitlines()[-1])
    return {str(pathlib.Path(p).relative_to(REPO.resolve())) for p in opened
            if "__pycache__" not in pathlib.Path(p).parts}


def test_the_wheel_holds_every_file_the_code_opens(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        shipped = set(whl.namelist())
    opened = _opened_at_run_time()
    # The run must have read what the check is about: a module, a compiled extension and
    # the strict-field schema. Without these, an empty set would pass.
    assert "fitcore/schema.json" in opened, sorted(opened)
    assert any(p.endswith(".so") for p in opened), sorted(opened)
    assert "admission/app/cli.py" in opened, sorted(opened)
    assert "admission/app/nodeshapes.crd.yaml" in opened, sorted(opened)
    missing = sorted(opened - shipped)
    assert not missing, f"opened at run time but not in {installed.wheel.name}: {missing}"

    tracked = subprocess.run(["git", "ls-files", *PACKAGES], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    data = [f for f in tracked if not f.endswith((".py", ".pyx", ".pxd", ".pyi", ".c"))]
    assert "fitcore/schema.json" in data
    missing = sorted(set(data) - shipped)
    assert not missing, f"package files git tracks but the wheel lacks: {missing}"


def test_the_installed_commands_run_outside_the_source_tree(installed: Installed) -> None:
    compiled = sorted(f"fitcore.{p.stem}" for p in (REPO / "fitcore").glob("*.pyx"))
    assert "fitcore._project" in compiled
    where = installed.run("python", "-c",
                          "import fitcore, admission;"
                          f"import {', '.join(compiled)};"
                          "print(fitcore.__file__); print(admission.__file__)")
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        path = pathlib.Path(line).resolve()
        assert installed.venv.resolve() in path.parents, f"imported from {path}, not the venv"
        assert REPO not in path.parents

    version = installed.run("fitgate", "version")
    assert version.returncode == 0, version.stderr
    assert "0.1.0" in version.stdout

    fit = installed.run("fitgate", *_FIT)
    assert fit.returncode == 0, fit.stderr
    assert "Traceback" not in fit.stderr
    assert "fits" in fit.stdout or "plan" in fit.stdout, fit.stdout

    verify = installed.run("fitgate", *_VERIFY)
    assert verify.returncode == 0, verify.stderr
    assert "does not fit the new nodes (coordination)" in verify.stdout, verify.stdout
    assert "attribute resource.kubernetes.io/pcieRoot is 'pci7', shape promised 'pci1'" \
        in verify.stdout, verify.stdout

    # `shape check` validates against the CRD shipped in the package: a clean shape
    # passes, and a shape the CRD's schema refuses is reported, not a missing file.
    clean = installed.run("fitgate", *_SHAPE_CHECK)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    bad = installed.venv / "bad-shape.yaml"
    bad.write_text("apiVersion: fitgate.io/v1alpha1\nkind: NodeShape\n"
                   "metadata: {name: bad}\nspec: {nodeLabels: {a: b}, allocatable: "
                   "{cpu: '-1'}, price: '1'}\n")
    refused = installed.run("fitgate", "shape", "check", str(bad))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "NodeShape bad" in refused.stdout and "Traceback" not in refused.stderr, \
        refused.stdout + refused.stderr

    plugin = installed.run("kubectl-fitgate", "--help")
    assert plugin.returncode == 0, plugin.stderr
    assert "explain" in plugin.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(180)
async def test_the_installed_serve_becomes_ready(installed: Installed, e2e: harness.Harness,
                                                 kubeconfig: pathlib.Path) -> None:
    port = _free_port()
    argv = [str(installed.bin("fitgate")), "serve", "--kubeconfig", str(kubeconfig),
            "--namespace", e2e.namespace, "--lease-name", "fitgate-installed",
            "--identity", "installed", "--health-address", "127.0.0.1",
            "--health-port", str(port)]
    env = {k: v for k, v in installed.env().items() if k in ("PATH", "PYTHONNOUSERSITE")}
    env["PYTHONPATH"] = ""
    proc = await e2e.start_process("fitgate-serve-installed", argv, env=env,
                                   cwd=installed.outside,
                                   ready_url=f"http://127.0.0.1:{port}/readyz", timeout=90)
    assert proc.alive(), proc.log_tail()
    assert "Traceback" not in proc.log_text(), proc.log_tail()
    assert await proc.stop() == 0, proc.log_tail()
