"""Configuration: file < environment < flags, and clear errors naming field and source."""

from __future__ import annotations

import io
import json
import logging
import pathlib

import pytest
import structlog

from admission import config
from admission.app import logging as flog


def test_defaults_are_valid() -> None:
    cfg = config.load(env={})
    assert cfg.health_port == 8081
    assert cfg.leader_election is True
    assert cfg.identity


def test_file_then_environment_then_flags(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "fitgate.yaml"
    f.write_text("health_port: 9000\nnamespace: from-file\nworkers: 2\nlog-level: debug\n")
    cfg = config.load(str(f), env={"FITGATE_NAMESPACE": "from-env",
                                   "FITGATE_WORKERS": "3"},
                      flags={"workers": 5, "kubeconfig": None})
    assert (cfg.health_port, cfg.namespace, cfg.workers, cfg.log_level) == (
        9000, "from-env", 5, "debug")


@pytest.mark.parametrize(("kw", "expected"), [
    ({"env": {"FITGATE_HEALTH_PORT": "abc"}},
     "config: health_port = 'abc' (from FITGATE_HEALTH_PORT): Input should be a valid "
     "integer"),
    ({"env": {}, "flags": {"workers": 0}},
     "config: workers = 0 (from --workers): Input should be greater than or equal to 1"),
    ({"env": {"FITGATE_LOG_LEVEL": "loud"}},
     "config: log_level = 'loud' (from FITGATE_LOG_LEVEL): Input should be 'debug'"),
    ({"env": {"FITGATE_RENEW_DEADLINE": "20"}},
     "lease timings need retry_period < renew_deadline < lease_duration"),
], ids=["not-an-int", "out-of-range", "not-a-choice", "lease-timings"])
def test_errors_name_the_field_and_its_source(kw: dict, expected: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(**kw)
    assert expected in str(err.value)


def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(env={"FITGATE_HEALTH_PORT": "70000", "FITGATE_WORKERS": "x"})
    assert "health_port" in str(err.value) and "workers" in str(err.value)


def test_unknown_file_field_and_unreadable_file(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("helth_port: 1\n")
    with pytest.raises(config.ConfigError, match=r"unknown field 'helth_port' in .*c\.yaml"):
        config.load(str(f), env={})
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(str(tmp_path / "missing.yaml"), env={})


def test_logs_are_json_lines_bound_to_the_workload() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    flog.configure("info", "json", out)
    try:
        flog.for_workload("team-a", "train", check="fit").info("decided", verdict="fits")
        structlog.get_logger("x").debug("hidden")
    finally:
        structlog.reset_defaults()
        root.handlers[:] = handlers
        root.setLevel(level)
    (line,) = out.getvalue().splitlines()
    rec = json.loads(line)
    assert rec["workload"] == "team-a/train"
    assert rec["check"] == "fit"
    assert rec["event"] == "decided" and rec["level"] == "info"
