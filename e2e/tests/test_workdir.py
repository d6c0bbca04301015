"""The cluster's workdir is deleted only when the harness made it (no cluster needed)."""

from __future__ import annotations

import pathlib

import pytest

from e2e.cluster.local import cluster


def test_marked_workdir_is_emptied_and_marked_again(tmp_path: pathlib.Path) -> None:
    workdir = tmp_path / "run" / "cluster"
    cluster.prepare_workdir(workdir)
    (workdir / "etcd-data").mkdir()
    (workdir / "etcd-data" / "db").write_text("old run")
    cluster.prepare_workdir(workdir)
    assert sorted(p.name for p in workdir.iterdir()) == [cluster.WORKDIR_MARKER]


def test_empty_unmarked_directory_is_taken(tmp_path: pathlib.Path) -> None:
    cluster.prepare_workdir(tmp_path / "empty")
    (tmp_path / "empty2").mkdir()
    cluster.prepare_workdir(tmp_path / "empty2")
    assert (tmp_path / "empty2" / cluster.WORKDIR_MARKER).is_file()


def test_unmarked_directory_with_content_is_left_alone(tmp_path: pathlib.Path) -> None:
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(RuntimeError, match="refusing to delete"):
        cluster.prepare_workdir(precious)
    assert (precious / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize("where", ["root", "top-level", "home", "checkout", "cwd"],
                         ids=str)
def test_dangerous_paths_are_refused_even_when_marked(where: str) -> None:
    path = {"root": pathlib.Path("/"), "top-level": pathlib.Path("/work"),
            "home": pathlib.Path.home(),
            "checkout": pathlib.Path(cluster.__file__).resolve().parents[3],
            "cwd": pathlib.Path.cwd()}[where]
    with pytest.raises(RuntimeError, match="refusing to use"):
        cluster.prepare_workdir(path)
    assert path.exists()
