"""Upstream's own allocator test table, run against fitcore.

`k8s.io/dynamic-resource-allocation` keeps a hand-written table of a few hundred allocator
cases (`structured/internal/allocatortesting`), written by the people who define the
semantics. `harness/table_test.go` runs it with an allocator that delegates to fitcore:
for each case the table's driver hands over its inputs, this module's `worker` (a
long-lived subprocess of the Go test binary) makes the table's placeholder names valid
and answers with fitcore (both engines), and the harness then asks upstream's allocator,
with the scheduler's default features for that release, the same question. Each case
ends up as one record: the inputs as given to both, fitcore's answers, upstream's.

`compare` sorts each record per fitcore engine into

- exact: same verdict (fits / no fit / error) and, when it fits, the same devices;
- same verdict: both fit, with other devices;
- different: the verdicts differ;
- refused: fitcore refuses the input as invalid (it names the field).

docs/semantics.md lists, under "Upstream's allocator test table", every case that is
different or refused, and why; `test_table.py` fails on any other and on a listed case
that no longer differs. `python -m bench.oracle.table [--kube 1.37]` prints the counts
and the unexplained cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "harness" / "build.sh"
SEMANTICS = HERE.parent.parent / "docs" / "semantics.md"
RECORD = "FITGATE-TABLE "
#: Seconds allowed for building the harness from a cold cache, and for one run.
BUILD_TIMEOUT = 1800.0
RUN_TIMEOUT = 900.0
#: The top-level tests of table_test.go and the prefix their cases get here.
TESTS = {"TestFitcoreTable": "", "TestFitcoreLexicographicalTable": "lexicographical/"}
KINDS = ("exact", "same verdict", "different", "refused")


# ------------------------------------------------------------------ making names valid


#: Request names of the table that the API server refuses (a request name is a DNS
#: label: lowercase), and what they become.
_REQUEST_NAMES = {"subReq-0": "subreq-0", "subReq-1": "subreq-1"}


def _request_name(name: Any) -> Any:
    if not isinstance(name, str):
        return name
    head, sep, tail = name.rpartition("/")
    return f"{head}{sep}{_REQUEST_NAMES.get(tail, tail)}"


def _capacity_name(name: str) -> str:
    """A capacity name is a qualified name whose last part is a C identifier:
    `capacity-0` → `capacity_0`."""
    head, sep, tail = name.rpartition("/")
    return f"{head}{sep}{tail.replace('-', '_')}"


def _capacity_keys(mapping: Any) -> Any:
    if not isinstance(mapping, dict):
        return mapping
    return {_capacity_name(k): v for k, v in mapping.items()}


def make_valid(case: dict[str, Any]) -> dict[str, Any]:
    """The case with the table's placeholders that the API server would refuse made
    valid: subrequest names are DNS labels (`subReq-0` → `subreq-0`, also where
    constraints and configs name them), capacity names are C identifiers (`capacity-0` →
    `capacity_0`, in devices, requests and consumed capacity alike), a request for all
    devices sets no count (the table's builders set one and then switch the mode), and a
    claim has a namespace (the API server takes it from the request path). Everything
    else is left as the table wrote it."""
    out = json.loads(json.dumps(case))
    for s in out.get("slices") or []:
        for device in (s.get("spec") or {}).get("devices") or []:
            if "capacity" in device:
                device["capacity"] = _capacity_keys(device["capacity"])
    for claim in out.get("claims") or []:
        meta = claim.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        devices = (claim.get("spec") or {}).get("devices") or {}
        for request in devices.get("requests") or []:
            for body in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]:
                if body is not request.get("exactly"):
                    body["name"] = _request_name(body.get("name"))
                if body.get("allocationMode") == "All":
                    body.pop("count", None)
                capacity = body.get("capacity")
                if isinstance(capacity, dict) and "requests" in capacity:
                    capacity["requests"] = _capacity_keys(capacity["requests"])
        for entry in (devices.get("constraints") or []) + (devices.get("config") or []):
            if isinstance(entry.get("requests"), list):
                entry["requests"] = [_request_name(r) for r in entry["requests"]]
    for consumed in (out.get("allocated") or {}).get("consumed") or []:
        consumed["capacity"] = _capacity_keys(consumed.get("capacity"))
    return out


# ------------------------------------------------------------------------ fitcore side


def fitcore_answer(case: Mapping[str, Any], engine: str, kube_version: str) -> dict[str, Any]:
    """fitcore's answer to one table case: verdict fits / no-fit / error / undecided, or
    refused (invalid input), with reasons and, when it fits, the devices per claim."""
    from fitcore import api, errors, kube, model, values, versions

    try:
        # Go writes an empty list of the table as null.
        parsed = kube.inventory(list(case["slices"] or []), list(case["classes"] or []), [])
        claims = [kube.resource_claim(c) for c in case["claims"] or []]
        node = kube.node(case["node"])
        allocated = case["allocated"]

        def ident(d: Mapping[str, Any]) -> model.DeviceId:
            return model.DeviceId(d["driver"], d["pool"], d["device"])

        consumed = {ident(c): {name: values.Quantity.parse(q)
                               for name, q in c["capacity"].items()}
                    for c in allocated["consumed"]}
        state = model.AllocatedState(frozenset(ident(d) for d in allocated["devices"]),
                                     frozenset(ident(d) for d in allocated["shares"]),
                                     consumed)
    except errors.InputError as exc:
        return {"verdict": "refused", "reasons": [str(exc)], "results": None}
    inventory = model.Inventory(parsed.slices, parsed.classes, state)
    fit = api.allocate(node, inventory, claims, engine=engine,  # type: ignore[arg-type]
                       budget=2_000_000, kube=versions.parse(kube_version))
    results = None
    if fit.fits:
        results = [[{"request": r.request, "driver": r.id.driver, "pool": r.id.pool,
                     "device": r.id.device, "adminAccess": r.admin_access,
                     "shared": r.shared,
                     "consumedCapacity": {name: str(q) for name, q in
                                          r.consumed_capacity.items()} or None}
                    for r in claim] for claim in fit.allocations]
    return {"verdict": fit.verdict, "reasons": list(fit.reasons), "results": results}


def worker(kube_version: str) -> None:
    """Answer table cases on stdin, one JSON line each, with one JSON line on stdout:
    the case as fitcore took it (`make_valid`) and fitcore's answer per engine."""
    from fitcore import api

    engines = ["c", "py"] if api.compiled_available() else ["py"]
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            case = make_valid(json.loads(line))
            reply = {"case": case, "engine": engines[0],
                     "fitcore": {e: fitcore_answer(case, e, kube_version) for e in engines}}
        except Exception as exc:  # reported to the harness, which fails the run
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


# ------------------------------------------------------------------------- the harness


class TableError(RuntimeError):
    """The harness could not be built or run."""


def build(kube_version: str, timeout: float = BUILD_TIMEOUT) -> Path:
    """Build the harness for `kube_version` if needed (cached) and return its path."""
    try:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                              timeout=timeout, check=False,
                              env={**os.environ, "FITGATE_ORACLE_KUBE": kube_version})
    except subprocess.TimeoutExpired as exc:
        raise TableError(f"building the table harness took more than {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise TableError(f"harness/build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    path = Path(proc.stdout.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        raise TableError(f"harness/build.sh printed {path}, which is not an executable")
    return path


@dataclasses.dataclass(frozen=True)
class Record:
    name: str  # the table's case name
    case: dict[str, Any]
    fitcore: dict[str, dict[str, Any]]  # per engine
    upstream: dict[str, Any]


def run(kube_version: str, binary: Path | None = None,
        timeout: float = RUN_TIMEOUT) -> list[Record]:
    """Run the table against fitcore following `kube_version`; one record per case."""
    binary = binary or build(kube_version)
    worker_argv = [sys.executable, "-m", "bench.oracle.table", "worker", "--kube", kube_version]
    try:
        proc = subprocess.run(
            [str(binary), "-test.v", "-test.count=1", "-test.timeout=0"],
            capture_output=True, text=True, timeout=timeout, check=False,
            cwd=HERE.parent.parent,
            env={**os.environ, "FITGATE_TABLE_WORKER": json.dumps(worker_argv)})
    except subprocess.TimeoutExpired as exc:
        raise TableError(f"the table took more than {timeout:.0f}s") from exc
    records = list(parse(proc.stdout))
    # The binary's exit code reflects the table's own assertions (written for each
    # case's features) and is not ours to judge; a worker failure ends the run early.
    if not records or "fitgatetable:" in proc.stderr:
        raise TableError(f"the table run gave {len(records)} records (exit "
                         f"{proc.returncode}):\n{proc.stderr[-4000:]}")
    return records


_RUN = re.compile(r"^=== RUN\s+(\S+)$")


def parse(output: str) -> Iterator[Record]:
    """Records of a `-test.v` run: each FITGATE-TABLE line belongs to the last case that
    started (`=== RUN   TestFitcoreTable/<case>`; the table runs cases one by one)."""
    current = None
    for line in output.splitlines():
        started = _RUN.match(line)
        if started:
            test, _, name = started.group(1).partition("/")
            current = TESTS.get(test, f"{test}/") + name if name else None
        elif line.startswith(RECORD):
            if current is None:
                raise TableError(f"a record outside any table case: {line[:200]}")
            data = json.loads(line[len(RECORD):])
            yield Record(current, data["case"], data["fitcore"], data["upstream"])


# ---------------------------------------------------------------------------- compare


def _results(results: list[list[dict[str, Any]]] | None) -> list[list[tuple[Any, ...]]]:
    from fitcore import values

    out = []
    for claim in results or []:
        rows = []
        for r in claim:
            consumed = tuple(sorted((name, values.Quantity.parse(q).value) for name, q in
                                    (r.get("consumedCapacity") or {}).items()))
            rows.append((r["request"], r["driver"], r["pool"], r["device"],
                         bool(r["adminAccess"]), bool(r["shared"]), consumed))
        out.append(rows)
    return out


def classify(record: Record, engine: str) -> str:
    """One of KINDS for fitcore's `engine` against upstream on this record."""
    ours, theirs = record.fitcore[engine], record.upstream
    if ours["verdict"] == "refused":
        return "refused"
    if ours["verdict"] != theirs["verdict"]:
        return "different"
    if ours["verdict"] == "fits" and _results(ours["results"]) != _results(theirs["results"]):
        return "same verdict"
    return "exact"


@dataclasses.dataclass
class Summary:
    kube: str
    engine: str
    by_kind: dict[str, list[str]]

    def line(self) -> str:
        n = {kind: len(self.by_kind[kind]) for kind in KINDS}
        compared = n["exact"] + n["same verdict"] + n["different"]
        return (f"upstream table, Kubernetes {self.kube}, fitcore engine {self.engine}: "
                f"{n['exact']} exact, {n['same verdict']} same verdict, "
                f"{n['different']} different of {compared}; {n['refused']} refused as "
                f"input the API server does not accept")


def summarize(records: list[Record], kube_version: str) -> list[Summary]:
    engines = sorted({e for r in records for e in r.fitcore}, key=lambda e: e != "c")
    out = []
    for engine in engines:
        by_kind: dict[str, list[str]] = {kind: [] for kind in KINDS}
        for record in records:
            by_kind[classify(record, engine)].append(record.name)
        out.append(Summary(kube_version, engine, by_kind))
    return out


_SECTION = "## Upstream's allocator test table"
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([0-9., ]+?)\s*\|\s*(different|refused)\s*\|")


def listed(path: Path = SEMANTICS) -> dict[tuple[str, str], str]:
    """(Kubernetes version, case) -> kind, from the table in docs/semantics.md's section
    on upstream's test table (rows `| \\`case\\` | 1.36, 1.37 | different | why |`)."""
    out: dict[tuple[str, str], str] = {}
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            inside = line.strip() == _SECTION
            continue
        row = _ROW.match(line) if inside else None
        if row:
            for version in row.group(2).split(","):
                out[(version.strip(), row.group(1))] = row.group(3)
    return out


def unexplained(summary: Summary, known: Mapping[tuple[str, str], str]) -> list[str]:
    """What the docs do not explain: a case that is different or refused without its
    row (or with a row of the other kind), and a row whose case no longer is."""
    problems = []
    for kind in ("different", "refused"):
        for name in summary.by_kind[kind]:
            if known.get((summary.kube, name)) != kind:
                problems.append(f"{name}: {kind} on {summary.kube} (engine {summary.engine}), "
                                f"not listed as such in docs/semantics.md")
    seen = {name: kind for kind, names in summary.by_kind.items() for name in names}
    for (version, name), kind in known.items():
        if version == summary.kube and seen.get(name) != kind:
            problems.append(f"{name}: listed as {kind} on {version} in docs/semantics.md, but "
                            f"is {seen.get(name, 'not in the table')} (engine {summary.engine})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.oracle.table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", choices=["report", "worker"], default="report")
    parser.add_argument("--kube", action="append", help="1.36 or 1.37 (default: both)")
    parser.add_argument("--show", action="store_true", help="list the cases of every kind")
    args = parser.parse_args(argv)
    if args.mode == "worker":
        worker((args.kube or ["1.36"])[-1])
        return 0
    known = listed()
    bad = 0
    for version in args.kube or ["1.36", "1.37"]:
        for summary in summarize(run(version), version):
            print(summary.line())
            for kind in KINDS[1:] if args.show else ():
                for name in summary.by_kind[kind]:
                    print(f"  {kind}: {name}")
            for problem in unexplained(summary, known):
                print(f"  UNEXPLAINED {problem}")
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
