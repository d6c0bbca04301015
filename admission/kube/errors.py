"""Errors every `client.Client` implementation raises alike."""

from __future__ import annotations


class ApiError(Exception):
    """The API server answered with an error (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class ConfigError(Exception):
    """No usable client configuration: the kubeconfig is missing, empty, not YAML, or
    names no usable cluster, context or user (and the process is not in a pod). The
    message says which file and why."""


class NotFound(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(404, "NotFound", message)


class AlreadyExists(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(409, "AlreadyExists", message)


class Conflict(ApiError):
    """A write lost to a newer resourceVersion (optimistic concurrency)."""

    def __init__(self, message: str) -> None:
        super().__init__(409, "Conflict", message)


class Gone(ApiError):
    """A watch's resourceVersion is too old (410): list again."""

    def __init__(self, message: str) -> None:
        super().__init__(410, "Gone", message)
