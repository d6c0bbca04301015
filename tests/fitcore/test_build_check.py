"""Without the compiled core, fitcore fails loudly unless told to use the reference."""

from __future__ import annotations

import os
import subprocess
import sys

# Make `import fitcore._alloc` fail in a fresh interpreter, as it does when not built.
HIDE = "import sys; sys.modules['fitcore._alloc'] = None; import fitcore.api as a; "


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "FITCORE_NO_EXTENSIONS"}
    return subprocess.run([sys.executable, "-c", HIDE + code], capture_output=True, text=True,
                          env={**environ, **env}, timeout=60, check=False)


def test_missing_extension_fails_with_build_instructions() -> None:
    result = run("print('imported')")
    assert result.returncode != 0
    assert "compiled core (fitcore._alloc) is not built" in result.stderr
    assert "pip install -e ." in result.stderr and "FITCORE_NO_EXTENSIONS=1" in result.stderr


def test_reference_engine_when_asked() -> None:
    result = run("print(a.compiled_available())", FITCORE_NO_EXTENSIONS="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# The same for the compiled reader, which fitcore.schema loads for the readers.
HIDE_READER = "import sys; sys.modules['fitcore._read'] = None; "
READ_SLICE = (
    "from fitcore import inventory, kube, schema; "
    "inv = inventory.Inventory(); "
    "inv.apply('ADDED', {'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceSlice', "
    "'metadata': {'name': 's'}, 'spec': {'driver': 'gpu.example.com', 'nodeName': 'n', "
    "'pool': {'name': 'p', 'resourceSliceCount': 1}, 'devices': [{'name': 'gpu-0', "
    "'attributes': {'uuid': {'string': 'GPU-0'}}}]}}); "
    "print(schema.compiled is None, kube._COMPILED is None, inv.stats()['devices'])")


def run_reader(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "FITCORE_NO_EXTENSIONS"}
    return subprocess.run([sys.executable, "-c", HIDE_READER + code], capture_output=True,
                          text=True, env={**environ, **env}, timeout=60, check=False)


def test_missing_reader_fails_with_build_instructions() -> None:
    result = run_reader("import fitcore.kube")
    assert result.returncode != 0
    assert "compiled reader (fitcore._read) is not built" in result.stderr
    assert "pip install -e ." in result.stderr and "FITCORE_NO_EXTENSIONS=1" in result.stderr


def test_python_readers_when_asked() -> None:
    result = run_reader(READ_SLICE, FITCORE_NO_EXTENSIONS="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "1"]


# The same for the compiled per-node indexing, which fitcore.snapshot loads.
HIDE_PROJECT = "import sys; sys.modules['fitcore._project'] = None; "


def test_missing_project_fails_with_build_instructions() -> None:
    environ = {k: v for k, v in os.environ.items() if k != "FITCORE_NO_EXTENSIONS"}
    result = subprocess.run([sys.executable, "-c", HIDE_PROJECT + "import fitcore.snapshot"],
                            capture_output=True, text=True, env=environ, timeout=60,
                            check=False)
    assert result.returncode != 0
    assert "compiled per-node indexing (fitcore._project) is not built" in result.stderr
    assert "pip install -e ." in result.stderr and "FITCORE_NO_EXTENSIONS=1" in result.stderr


def test_python_indexing_when_asked() -> None:
    code = (HIDE_PROJECT + "from fitcore import projection, snapshot; "
            "print(snapshot.compiled is None)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "FITCORE_NO_EXTENSIONS": "1"}, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
