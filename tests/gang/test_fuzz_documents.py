"""Fuzzed documents never crash `fitgate fit`: exit 0 (a verdict) or 2 (bad input).

Real-world manifests (tests/gang/manifests) are mutated at random (subtrees replaced by
random JSON values, keys dropped or renamed, objects nested deep, raw text) and fed to
the CLI in-process. Any exception escaping `main` (a traceback) or an exit status other
than 0 and 2 fails. FITGATE_DOC_FUZZ_EXAMPLES sets the number of cases (default 10,000).
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import random
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.app import cli

EXAMPLES = int(os.environ.get("FITGATE_DOC_FUZZ_EXAMPLES", "10000"))
HERE = pathlib.Path(__file__).parent / "manifests"
CASES = [("extended-job/inventory.yaml", "extended-job/workload.yaml"),
         ("nvidia-mig/inventory.yaml", "nvidia-mig/workload.yaml"),
         ("v1beta1-dump/inventory.yaml", "v1beta1-dump/workload.yaml"),
         ("multihost/inventory.yaml", "multihost/workload.yaml"),
         ("anti-affinity/inventory.yaml", "anti-affinity/workload.yaml")]
LOADED = [([d for d in yaml.safe_load_all((HERE / inv).read_text()) if d],
           [d for d in yaml.safe_load_all((HERE / wl).read_text()) if d]) for inv, wl in CASES]
TEXTS = [((HERE / inv).read_text(), (HERE / wl).read_text()) for inv, wl in CASES]

_SCALARS: list[Any] = [None, True, False, 0, -1, 1, 2**63, -(2**63) - 1, 1.5, float("nan"),
                       "", "x", "1Gi", "-5", "1e400", "Exists", "All", "v1", "ResourceSlice",
                       "resource.k8s.io/v1beta1", "kubernetes.io/hostname", "\x00", "é" * 70]
_KEYS = ["name", "kind", "apiVersion", "spec", "metadata", "devices", "count", "basic",
         "exactly", "requests", "limits", "nodeName", "nodeSelector", "items",
         "generateName", "allocatable", "capacity", "labels", "affinity", "pool",
         "resourceClaims", "firstAvailable", "status", "allocation", "selectors", "unknown"]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.55:
        return rng.choice(_SCALARS)
    if roll < 0.8:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(_KEYS): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _nodes(doc: Any, out: list[tuple[Any, Any]]) -> None:
    """Every (container, key/index) position in a document."""
    if isinstance(doc, dict):
        for k in list(doc):
            out.append((doc, k))
            _nodes(doc[k], out)
    elif isinstance(doc, list):
        for i in range(len(doc)):
            out.append((doc, i))
            _nodes(doc[i], out)


def mutate(docs: list[Any], rng: random.Random) -> list[Any]:
    docs = copy.deepcopy(docs)
    for _ in range(rng.randint(1, 4)):
        positions: list[tuple[Any, Any]] = []
        _nodes(docs, positions)
        if not positions:
            break
        parent, key = rng.choice(positions)
        op = rng.random()
        if op < 0.4:
            parent[key] = _random_value(rng)
        elif op < 0.55 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.7 and isinstance(parent, dict):
            parent[rng.choice(_KEYS) + rng.choice(["", "s", "X"])] = parent.pop(key)
        elif op < 0.8:
            nested: Any = parent[key]
            for _ in range(rng.choice([2, 20, 120])):
                nested = [nested] if rng.random() < 0.5 else {"a": nested}
            parent[key] = nested
        elif op < 0.9 and isinstance(parent[key], list):
            parent[key] = parent[key] * rng.randint(2, 40)
        else:
            parent[key] = copy.deepcopy(rng.choice(positions)[0])
    return docs


def _dump(docs: list[Any]) -> str:
    try:
        return yaml.dump_all(docs, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    except (yaml.YAMLError, RecursionError, ValueError):
        return json.dumps(docs, default=str)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("fuzz-docs")


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=st.integers(0, len(LOADED) - 1), seed=st.integers(0, 2**32 - 1),
       which=st.sampled_from(["inventory", "workload", "both", "text"]))
def test_fuzzed_documents_never_crash(workdir: pathlib.Path, case: int, seed: int,
                                      which: str) -> None:
    rng = random.Random(seed)
    inventory, work = LOADED[case]
    inv_text, wl_text = TEXTS[case]
    if which in ("inventory", "both"):
        inv_text = _dump(mutate(inventory, rng))
    if which in ("workload", "both"):
        wl_text = _dump(mutate(work, rng))
    if which == "text":  # raw bytes spliced into the YAML text
        cut = rng.randrange(len(wl_text))
        wl_text = wl_text[:cut] + rng.choice(["{", "[", ": :", "&a *a", "\t", "---\n",
                                              "!!python/object:os.system", "\x00"]) + \
            wl_text[cut:]
    (workdir / "inv.yaml").write_text(inv_text)
    (workdir / "wl.yaml").write_text(wl_text)
    args = ["fit", "--inventory", str(workdir / "inv.yaml"), "--workload",
            str(workdir / "wl.yaml"), "-o", "json"]
    if rng.random() < 0.2:
        args.append("--lenient")
    code = cli.main(args)
    assert code in (0, 2)
