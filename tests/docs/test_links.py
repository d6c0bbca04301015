"""The README and docs link only to files inside the repository, and those files exist."""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_stay_inside_the_repository_and_resolve(page: pathlib.Path) -> None:
    links = LINK.findall(page.read_text())
    bad = []
    for link in links:
        target = link.split("#", 1)[0]
        if "://" in link or link.startswith("mailto:"):
            bad.append(f"{link}: outside the repository")
            continue
        if not target:
            continue
        path = (page.parent / target).resolve()
        if not path.is_relative_to(REPO):
            bad.append(f"{link}: outside the repository")
        elif not path.exists():
            bad.append(f"{link}: no such file")
    assert bad == []


def test_readme_names_the_make_test_stages_in_the_order_make_runs_them() -> None:
    makefile = (REPO / "Makefile").read_text()
    stages = re.findall(r"^TEST_TARGETS :?= (.+)$", makefile, re.M)[0].split()
    for include in re.findall(r"^-include (\S+)$", makefile, re.M):
        text = (REPO / include).read_text()
        variables = dict(re.findall(r"^(\w+) :?= (\S+)$", text, re.M))
        stages += [re.sub(r"\$\((\w+)\)", lambda m, v=variables: v[m.group(1)], t)
                   for line in re.findall(r"^TEST_TARGETS \+= (.+)$", text, re.M)
                   for t in line.split()]
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("`make test` runs, in order:"):]
    positions = [section.index(f"(`{stage}`") for stage in stages]
    assert positions == sorted(positions), stages
