"""Structured logs: structlog, one JSON object per line, with the object a line is about
bound to it (`for_workload(namespace, name)` → every line carries `workload=ns/name`).

`configure` runs once at start (`fitgate serve`); modules take their logger with
`structlog.get_logger("fitgate.<part>")` and bind what they work on (`log.bind(...)`).
The standard library's loggers (kubernetes_asyncio, aiohttp) go through the same
renderer at the configured level.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    renderer: Any = (structlog.processors.JSONRenderer() if fmt == "json"
                     else structlog.dev.ConsoleRenderer(colors=False))
    shared: list[Any] = [structlog.contextvars.merge_contextvars,
                         structlog.processors.add_log_level,
                         structlog.processors.TimeStamper(fmt="iso", utc=True)]
    structlog.configure(
        processors=[*shared, structlog.processors.dict_tracebacks, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False)
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(_LEVELS[level], logging.INFO))


def for_workload(namespace: str, name: str, **more: Any) -> Any:
    """A logger bound to one Workload (and anything else given, e.g. check=...)."""
    return structlog.get_logger("fitgate").bind(workload=f"{namespace}/{name}", **more)
