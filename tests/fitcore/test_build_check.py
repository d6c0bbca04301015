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
