"""fitgate's container image, run as the chart runs it.

The module fixture builds the image with `make image`'s script
(``e2e/cluster/container/build-image.sh``: offline, warm when no input changed) and gets a
container engine from ``e2e/cluster/container/engine.sh`` (the user's Docker, or a private
dockerd under the build cache). Each container then runs like the chart's Deployment does:
uid/gid 65532, read-only root filesystem, a writable tmpfs at /tmp only, every capability
dropped, no network. The tests call only the image's console scripts and its Python, never
fitgate's modules from this process.

- `fitgate version` prints the package version;
- `fitgate shape check` runs on the bundled shapes with the CRD the wheel ships;
- the compiled core (``fitcore._alloc``, ``fitcore._read``) is the one imported, from a
  shared object inside the image's environment, and the API reports it available;
- `fitgate fit` on the bundled example (mounted read-only) gives the same JSON answer as
  the source tree's own CLI: the image does not crash on its first object (issue #26).
- the image's default user and entrypoint are the chart's;
- the engine starts a privileged container (kind's node containers are privileged; on
  hosts whose capability bounding set is partial, the private dockerd's runc-capdrop
  wrapper is what makes this work).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tomllib
from collections.abc import Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTAINER = REPO / "e2e" / "cluster" / "container"
IMAGE = "fitgate:latest"
FIT_ARGS = ["fit", "--inventory", "{ex}/inventory", "--shapes", "{ex}/shapes",
            "--workload", "{ex}/workload.yaml", "-o", "json"]


@pytest.fixture(scope="module")
def engine_env() -> Iterator[dict[str, str]]:
    out = subprocess.run([str(CONTAINER / "engine.sh")], capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, f"no container engine:\n{out.stderr}"
    env = dict(os.environ)
    for line in out.stdout.splitlines():
        if line.startswith("export DOCKER_HOST="):
            env["DOCKER_HOST"] = line.split("=", 1)[1]
    build = subprocess.run([str(CONTAINER / "build-image.sh"), sys.executable], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert build.returncode == 0, f"make image failed:\n{build.stdout}\n{build.stderr}"
    print(build.stdout.strip().splitlines()[-1])
    yield env


def run(env: dict[str, str], *args: str, entrypoint: str | None = None,
        mounts: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`docker run` as the chart's pod spec runs fitgate."""
    cmd = ["docker", "run", "--rm", "--user", "65532:65532", "--read-only",
           "--tmpfs", "/tmp:rw,size=64m", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges", "--network", "none"]
    for m in mounts:
        cmd += ["-v", m]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    cmd += [IMAGE, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_version(engine_env: dict[str, str]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = run(engine_env, "version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"fitgate {version}"  # then the Kubernetes versions


def test_compiled_core_imported(engine_env: dict[str, str]) -> None:
    code = ("import json, fitcore._alloc as a, fitcore._read as r, fitcore.api as api;"
            "print(json.dumps([a.__file__, r.__file__, api.compiled_available()]))")
    out = run(engine_env, "-c", code, entrypoint="python")
    assert out.returncode == 0, out.stderr
    alloc, read, available = json.loads(out.stdout)
    for path in (alloc, read):
        assert path.startswith("/opt/fitgate/lib/python3.11/site-packages/fitcore/"), path
        assert path.endswith(".so"), f"pure-Python module, not the compiled core: {path}"
    assert available is True


def test_fit_on_bundled_example(engine_env: dict[str, str]) -> None:
    examples = REPO / "examples"
    out = run(engine_env, *(a.format(ex="/examples") for a in FIT_ARGS),
              mounts=(f"{examples}:/examples:ro",))
    assert out.returncode == 0, f"fitgate fit crashed in the image:\n{out.stderr}"
    in_image = json.loads(out.stdout)
    host_run = subprocess.run([str(pathlib.Path(sys.executable).parent / "fitgate"),
                               *(a.format(ex=examples) for a in FIT_ARGS)],
                              capture_output=True, text=True, timeout=120, check=True)
    host = json.loads(host_run.stdout)
    for answer in (in_image, host):  # the measured time differs run to run
        answer["stats"].pop("seconds")
    assert in_image["verdict"] == host["verdict"]
    assert in_image == host
    assert in_image["placements"], in_image


def test_shape_check_reads_the_shipped_crd(engine_env: dict[str, str]) -> None:
    # `fitgate shape check` validates against admission/app/nodeshapes.crd.yaml, a package
    # data file: in the image it must come from the installed wheel.
    examples = REPO / "examples"
    out = run(engine_env, "shape", "check", "/examples/shapes",
              mounts=(f"{examples}:/examples:ro",))
    assert out.returncode == 0, out.stdout + out.stderr
    where = run(engine_env, "-c", "from admission.app import shapecheck as s;"
                "print(s.CRD_FILE, s.CRD_FILE.is_file())", entrypoint="python")
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [
        "/opt/fitgate/lib/python3.11/site-packages/admission/app/nodeshapes.crd.yaml",
        "True"], where.stdout


def test_default_user_and_entrypoint(engine_env: dict[str, str]) -> None:
    out = subprocess.run(["docker", "image", "inspect", "-f",
                          "{{json .Config.User}} {{json .Config.Entrypoint}}", IMAGE],
                         env=engine_env, capture_output=True, text=True, timeout=60,
                         check=True)
    user, entrypoint = out.stdout.split(" ", 1)
    assert json.loads(user) == "65532:65532"
    assert json.loads(entrypoint) == ["fitgate"]


def test_engine_runs_privileged_containers(engine_env: dict[str, str]) -> None:
    out = subprocess.run(["docker", "run", "--rm", "--privileged", "--network", "none",
                          "--entrypoint", "grep", IMAGE, "CapEff", "/proc/self/status"],
                         env=engine_env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    # uid 65532 has no effective capabilities; root (--user 0) would. The container started.
    assert out.stdout.startswith("CapEff:"), out.stdout
    root = subprocess.run(["docker", "run", "--rm", "--privileged", "--user", "0",
                           "--network", "none", "--entrypoint", "grep", IMAGE, "CapEff",
                           "/proc/self/status"],
                          env=engine_env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert root.returncode == 0, root.stderr
    assert int(root.stdout.split()[1], 16) & (1 << 21), "CAP_SYS_ADMIN missing: not privileged"
