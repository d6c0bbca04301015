"""The import contracts of `.importlinter` hold, and the one that keeps admission on
fitcore's package-level API breaks when a deep import is planted (issue #18).

`make lint` runs lint-imports on the tree; this test runs it on a copy of the two
packages, once as they are and once with `from fitcore.<module> import ...` planted in an
admission module, so a contract that stopped catching deep imports would fail here.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
API_CONTRACT = ("admission uses fitcore only through its package-level API "
                "(import fitcore, never fitcore.<module>)")


def _copy(root: pathlib.Path) -> None:
    for package in ("fitcore", "admission"):
        shutil.copytree(REPO / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    shutil.copy(REPO / ".importlinter", root / ".importlinter")


def _lint(root: pathlib.Path) -> tuple[int, str]:
    """lint-imports' exit code and its report, whitespace folded (it wraps long lines)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c",
         "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"],
        cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False)
    return out.returncode, " ".join((out.stdout + out.stderr).split())


def test_a_deep_fitcore_import_in_admission_breaks_the_api_contract(
        tmp_path: pathlib.Path) -> None:
    _copy(tmp_path)
    code, report = _lint(tmp_path)
    assert code == 0, report
    assert f"{API_CONTRACT} KEPT" in report, report

    planted = tmp_path / "admission" / "kueue.py"
    planted.write_text(planted.read_text() + "\nfrom fitcore.model import Node  # planted\n")
    code, report = _lint(tmp_path)
    assert code != 0, report
    assert f"{API_CONTRACT} BROKEN" in report, report
    assert "admission.kueue -> fitcore.model" in report, report
