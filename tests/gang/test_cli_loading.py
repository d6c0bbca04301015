"""`fitgate fit` reads what `kubectl get -o json` prints, and reports every bad object."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from admission.app import cli, offline
from fitcore import read
from tests.gang import realistic as rl

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_list(path: pathlib.Path, objects: list[dict[str, object]]) -> str:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def test_a_json_list_answers_as_the_yaml_files_do(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    objects = [d for p in sorted((EXAMPLES / "inventory").glob("*.yaml"))
               for d in yaml.safe_load_all(p.read_text()) if d]
    inventory = as_list(tmp_path / "inventory.json", objects)
    args = ["--shapes", str(EXAMPLES / "shapes"), "--workload",
            str(EXAMPLES / "workload.yaml"), "-o", "json"]
    code, out, _ = run(capsys, "fit", "--inventory", inventory, *args)
    code_yaml, out_yaml, _ = run(capsys, "fit", "--inventory", str(EXAMPLES / "inventory"),
                                 *args)
    assert code == code_yaml == 0
    got, want = json.loads(out), json.loads(out_yaml)
    for doc in (got, want):
        del doc["stats"]["seconds"]
    assert got == want


def test_realistic_json_list_plans(tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    inventory = as_list(tmp_path / "inventory.json", rl.cluster(120, 3))
    shapes = as_list(tmp_path / "shapes.json", rl.shapes())
    workload = as_list(tmp_path / "workload.json",
                       [rl.template(), rl.workload(64, topology=True)])
    code, out, err = run(capsys, "fit", "--inventory", inventory, "--shapes", shapes,
                         "--workload", workload, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "needs-capacity"
    assert doc["stats"]["nodes"] == 120


def test_every_bad_object_is_reported_with_its_file(tmp_path: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    objects = rl.cluster(2, 3)
    node = next(o for o in objects if o["kind"] == "Node")
    node["status"]["allocatable"]["cpu"] = "lots"
    first_slice = next(o for o in objects if o["kind"] == "ResourceSlice")
    first_slice["spec"]["devices"][0]["name"] = "Not A Name"
    inventory = as_list(tmp_path / "inventory.json", objects)
    workload = as_list(tmp_path / "workload.json", [rl.template(), rl.workload(2)])
    code, _, err = run(capsys, "fit", "--inventory", inventory, "--workload", workload)
    assert code == cli.EXIT_BAD_INPUT
    assert f"{inventory}: Node node-00000: status.allocatable['cpu']" in err
    assert f"{inventory}: ResourceSlice node-00000-gpu: spec.devices[0].name" in err


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_an_integer_of_thousands_of_digits_is_bad_input_named_by_file(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    """Python refuses to convert an integer of more than 4,300 digits with a bare
    ValueError; the readers answer bad input naming the file. JSON refuses the number;
    YAML reads it as Kubernetes does (go-yaml v2: beyond uint64 and beyond a float, a
    plain scalar is a string), so the field check names the file, object and field."""
    text = (EXAMPLES / "workload.yaml").read_text()
    assert "    count: 6\n" in text
    docs = list(yaml.safe_load_all(text))
    big = "9" * 5000
    path = tmp_path / f"workload{suffix}"
    if suffix == ".yaml":
        path.write_text(text.replace("    count: 6\n", f"    count: {big}\n"))
    else:
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
                        .replace('"count": 6', f'"count": {big}'))
    code, _, err = run(capsys, "fit", "--inventory", str(EXAMPLES / "inventory"),
                       "--workload", str(path))
    assert code != 0
    assert "Traceback" not in err
    if suffix == ".yaml":
        assert f"{path}: Workload team-b/train-llm: spec.podSets[0].count: must be an " \
               "integer, got str" in err, err
    else:
        assert f"{path}: refused:" in err and "an integer of 5,000 digits" in err, err


class _Clock:
    """A clock advancing `tick` seconds each time it is read."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def _load_with(tmp_path: pathlib.Path, tick: float) -> list[str]:
    inventory = as_list(tmp_path / "inventory.json",
                        [d for p in sorted((EXAMPLES / "inventory").glob("*.yaml"))
                         for d in yaml.safe_load_all(p.read_text()) if d])
    lines: list[str] = []
    progress = read.Progress(lines.append, clock=_Clock(tick))
    offline.load_inventory([inventory], [str(EXAMPLES / "shapes")],
                       str(EXAMPLES / "workload.yaml"), progress=progress)
    return lines


def test_a_slow_load_reports_progress_at_most_once_a_second(tmp_path: pathlib.Path) -> None:
    lines = _load_with(tmp_path, tick=0.4)  # each object read "takes" 0.4 s
    assert lines, "a load over a second must report its progress"
    assert all(line.startswith("reading inventory: ") and line.endswith(" objects ...\n")
               for line in lines)
    total = int(lines[0].split(" of ")[1].split()[0].replace(",", ""))
    done = [int(line.split(": ")[1].split(" of ")[0].replace(",", "")) for line in lines]
    assert done == sorted(done) and done[-1] < total
    # 0.4 s per step, at most one line a second: one line every third step at most
    assert len(lines) <= total // 2


def test_a_fast_load_reports_nothing(tmp_path: pathlib.Path) -> None:
    assert _load_with(tmp_path, tick=0.0001) == []


def test_fit_notes_count_what_it_skipped_across_files(tmp_path: pathlib.Path) -> None:
    extra = tmp_path / "other.yaml"
    extra.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n---\n"
                     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: c}\n")
    notes: list[str] = []
    offline.load_inventory([str(EXAMPLES / "inventory"), str(extra)], [],
                           str(EXAMPLES / "workload.yaml"), notes=notes)
    assert "skipped 3 objects of kinds fitgate does not read: apps/v1 Deployment (1), " \
           "v1 ConfigMap (2)" in notes, notes
