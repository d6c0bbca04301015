"""Every `fitgate` command the README and docs show that can run offline does run.

A command can run offline when it is `fitgate fit`, `verify` or `version` (with or without
`.venv/bin/`, after a `$ ` prompt, continued over lines with `\\`) and every file it
names is in the repository. Each runs in-process from the repository's root and must
exit 0 (these commands answer a verdict, not an error). Commands that need a cluster
(`explain`, `serve`, kubectl, helm) or files the reader makes first are left out; the
list of commands found is checked too, so a change that stops finding them fails.
"""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest

from admission.app import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)
OFFLINE = ("fit", "verify", "version")


def _commands(page: pathlib.Path) -> list[list[str]]:
    out = []
    for block in FENCE.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").split(" #", 1)[0]
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            if len(words) < 2 or words[0] not in ("fitgate", ".venv/bin/fitgate"):
                continue
            if words[1] not in OFFLINE or any(w.isupper() or "[" in w for w in words):
                continue  # a usage line (PATH, [--shapes PATH]), not a command
            files = [w for w in words[2:] if not w.startswith("-") and ("/" in w or
                                                                        "." in w)]
            if all((REPO / f).exists() for f in files):
                out.append(words[1:])
    return out


COMMANDS = [(page, argv) for page in PAGES for argv in _commands(page)]


def test_the_offline_commands_are_found() -> None:
    found = {(p.relative_to(REPO).as_posix(), a[0], a[a.index("--workload") + 1])
             for p, a in COMMANDS if "--workload" in a}
    assert ("README.md", "fit", "examples/workload.yaml") in found, found
    assert ("docs/platform-guide.md", "fit",
            "examples/gpu-cluster/jobs/train-h100.yaml") in found, found
    assert ("docs/fit.md", "fit", "examples/workload.yaml") in found, found


@pytest.mark.parametrize(("page", "argv"), COMMANDS,
                         ids=[f"{p.relative_to(REPO)}:{' '.join(a[:1])}-{i}"
                              for i, (p, a) in enumerate(COMMANDS)])
def test_a_documented_command_runs(page: pathlib.Path, argv: list[str],
                                   monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"{page.name}: fitgate {' '.join(argv)}\n{out}\n{err}"
    assert out.strip(), f"{page.name}: fitgate {' '.join(argv)} printed nothing"
