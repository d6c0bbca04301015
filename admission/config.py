"""`fitgate serve`'s configuration: one pydantic model, from a YAML file, the environment
and flags (later sources win: defaults < file < FITGATE_* environment < flags).

Every field has a flag `--field-name` and an environment variable `FITGATE_FIELD_NAME`;
the YAML file uses the field names (`health_port: 8081`). Values are validated at start;
`load` raises `ConfigError` listing every bad field with where its value came from, e.g.

    config: health_port = 'abc' (from FITGATE_HEALTH_PORT): Input should be a valid integer
"""

from __future__ import annotations

import os
import pathlib
import socket
import uuid
from collections.abc import Mapping
from typing import Any, Literal

import pydantic
import yaml

import fitcore

ENV_PREFIX = "FITGATE_"
#: `kube_version`: follow the API server's minor version (`admission.app.kubeversion`).
AUTO = "auto"


class ConfigError(Exception):
    """The configuration is not valid; the message names each field and its source."""


class Config(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    # API access
    kubeconfig: str | None = pydantic.Field(
        None, description="kubeconfig file (default: in-cluster, else $KUBECONFIG or "
                          "~/.kube/config)")
    context: str | None = pydantic.Field(None, description="kubeconfig context")
    request_timeout: float = pydantic.Field(30.0, gt=0, description="seconds per API call")

    # Leader election
    namespace: str = pydantic.Field("fitgate-system", min_length=1,
                                    description="namespace of the leader election Lease")
    leader_election: bool = pydantic.Field(True, description="elect a leader (off: this "
                                                             "replica leads)")
    lease_name: str = pydantic.Field("fitgate", min_length=1)
    identity: str = pydantic.Field(
        default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        min_length=1, description="this replica's name in the Lease")
    lease_duration: float = pydantic.Field(15.0, gt=0)
    renew_deadline: float = pydantic.Field(10.0, gt=0)
    retry_period: float = pydantic.Field(2.0, gt=0)

    # HTTP
    health_address: str = pydantic.Field("0.0.0.0", description="address of /healthz, "
                                                                "/readyz and /metrics")
    health_port: int = pydantic.Field(8081, ge=0, le=65535, description="0: any free port")
    webhook_address: str = pydantic.Field(
        "0.0.0.0", description="address the webhook listens on (all interfaces: the API "
                               "server reaches it through its Service)")
    webhook_port: int = pydantic.Field(9443, ge=0, le=65535)
    cert_dir: str | None = pydantic.Field(None, description="webhook TLS tls.crt/tls.key")
    webhook_max_connections: int = pydantic.Field(
        256, ge=1, le=65536, description="webhook connections open at once (from accept, "
        "before the TLS handshake); one over the cap is closed at once")
    webhook_header_timeout: float = pydantic.Field(
        10.0, gt=0, le=300, description="seconds a webhook connection has to complete its "
        "TLS handshake and a request's headers (from accept, and after each response)")
    webhook_body_timeout: float = pydantic.Field(
        10.0, gt=0, le=300, description="seconds to read a webhook request's body once its "
        "headers are in (else 408)")

    # Controllers and decisions
    workers: int = pydantic.Field(4, ge=1, le=64, description="reconciles in flight per "
                                                              "controller")
    decision_timeout: float = pydantic.Field(
        30.0, gt=0, description="seconds a decision may take before it is undecided "
                                "(each is also bounded by fitcore's work budget)")
    kube_version: str = pydantic.Field(
        AUTO, description="the Kubernetes minor version whose scheduler and DRA allocator "
                          "(default features) fitgate's decisions follow: auto (the API "
                          "server's, read at start) or one of "
                          f"{', '.join(fitcore.KUBE_VERSIONS)} to override it")
    provisioning_wait: float = pydantic.Field(
        600.0, gt=0, description="seconds to wait for provisioned nodes and their "
                                 "ResourceSlices before verifying")
    provisioning_timeout: float = pydantic.Field(
        1800.0, ge=0, description="seconds a ProvisioningRequest may stay neither "
                                  "Provisioned nor Failed before fitgate deletes it and "
                                  "retries the check (0: no deadline, for queued "
                                  "provisioning classes that answer in hours)")
    karpenter: bool = pydantic.Field(
        False, description="serve NodeShapes Karpenter serves (spec.provisioning.karpenter): "
                           "watch fitgate's NodeClaims and the NodePools, create NodeClaims "
                           "(needs Karpenter's CRDs and the chart's karpenter RBAC); the "
                           "deadline for their initialization is provisioning_timeout")
    webhook_decision_budget: float = pydantic.Field(
        0.010, gt=0, le=10, description="seconds a validation waits for a fit decision its "
        "verdict cache does not hold before allowing the Job unchecked (decided in the "
        "background for the next review of the spec); raise it to warn on first "
        "submission at the cost of webhook latency")
    webhook_decisions: Literal["process", "thread"] = pydantic.Field(
        "process", description="where the webhook's fit decisions run: a child process "
        "with its own inventory (the loop never shares the GIL or the garbage collector "
        "with them) or a thread of this process (less memory, for small clusters)")
    switch_interval: float = pydantic.Field(
        0.001, gt=0, le=0.1, description="seconds a thread holds the GIL while another "
        "waits (sys.setswitchinterval): the longest the event loop waits for a decision "
        "running in a thread, per wait (Python's default is 0.005)")

    # Logs
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"

    @pydantic.field_validator("kube_version")
    @classmethod
    def _kube_version(cls, value: str) -> str:
        if value not in (AUTO, *fitcore.KUBE_VERSIONS):
            raise ValueError(f"must be {AUTO} or one of {', '.join(fitcore.KUBE_VERSIONS)} "
                             "(the Kubernetes minor versions fitgate follows)")
        return value

    @pydantic.model_validator(mode="after")
    def _lease_timings(self) -> Config:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("lease timings need retry_period < renew_deadline < "
                             f"lease_duration, got {self.retry_period}, "
                             f"{self.renew_deadline}, {self.lease_duration}")
        return self


FIELDS = tuple(Config.model_fields)


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_var(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load(path: str | None = None, *, env: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> Config:
    """The configuration from a YAML file (optional), the environment (FITGATE_*) and
    flags (field name → value, None = not given)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    problems: list[str] = []
    if path:
        try:
            raw = yaml.safe_load(pathlib.Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"config: cannot read {path}: {exc}") from exc
        if not isinstance(raw, Mapping):
            raise ConfigError(f"config: {path} must hold a mapping of fields")
        for k, v in raw.items():
            key = str(k).replace("-", "_")
            if key not in FIELDS:
                problems.append(f"config: unknown field {k!r} in {path}")
                continue
            values[key], sources[key] = v, path
    for field in FIELDS:
        if env_var(field) in env:
            values[field], sources[field] = env[env_var(field)], env_var(field)
    for field, v in (flags or {}).items():
        if v is not None:
            values[field], sources[field] = v, flag(field)
    if problems:
        raise ConfigError("\n".join(problems))
    try:
        return Config(**values)
    except pydantic.ValidationError as exc:
        raise ConfigError(_explain(exc, values, sources)) from exc


def _explain(exc: pydantic.ValidationError, values: Mapping[str, Any],
             sources: Mapping[str, str]) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        field = str(err["loc"][0]) if err["loc"] else ""
        if field in values:
            lines.append(f"config: {loc} = {values[field]!r} (from {sources[field]}): "
                         f"{err['msg']}")
        else:
            lines.append(f"config: {loc or 'lease timings'}: {err['msg']}".replace(
                "Value error, ", ""))
    return "\n".join(lines)

