"""Local processes a test runs next to the cluster, such as ``fitgate serve``.

``Harness.start_process`` starts one and returns a ``LocalProcess``; it is tied to the
test: stopped at the end of the test (also on failure), and its log is printed with the
test's failure report. Each process is in a process group of its own and is stopped
with SIGTERM, a bounded wait, then SIGKILL (``cluster/local/processes.py``), so nothing
outlives the test. ``restart()`` starts the same command again with the same log file
(appended), for tests of a restarted controller.
"""

from __future__ import annotations

import asyncio
import pathlib
import ssl
import time

from e2e.cluster.local import processes

READY_TIMEOUT_S = 60.0


class LocalProcess:
    """One process of a test: ``argv`` with ``env`` added, output to ``log_path``."""

    def __init__(self, name: str, argv: list[str], run_dir: pathlib.Path,
                 env: dict[str, str] | None = None, cwd: pathlib.Path | None = None,
                 ready_url: str | None = None, ready_context: ssl.SSLContext | None = None
                 ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env or {})
        self.cwd = cwd
        self.run_dir = run_dir
        self.ready_url = ready_url
        self.ready_context = ready_context
        self.proc: processes.Process | None = None
        self.starts = 0

    @property
    def log_path(self) -> pathlib.Path:
        return self.run_dir / "logs" / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        return self.proc.popen.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    @property
    def returncode(self) -> int | None:
        return self.proc.popen.poll() if self.proc else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    async def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Start the process; with ``ready_url``, return once that URL answers 200
        (bounded; fails early, with the log's end, if the process exits)."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.proc = processes.Process(self.name, self.argv, self.run_dir, self.env,
                                      cwd=self.cwd)
        self.starts += 1
        if self.ready_url:
            await self.wait_ready(timeout)

    async def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        url = self.ready_url
        if not url:
            raise ValueError(f"{self.name} has no ready_url")
        deadline = time.monotonic() + timeout
        while True:
            if await asyncio.to_thread(processes.probe, url, self.ready_context):
                return
            if not self.alive():
                raise RuntimeError(f"{self.name} exited ({self.returncode}) before {url} "
                                   f"answered; log {self.log_path}:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.name}: {url} did not answer within {timeout:.0f}s; "
                                   f"log {self.log_path}:\n{self.log_tail()}")
            await asyncio.sleep(0.25)

    async def stop(self) -> int | None:
        """SIGTERM, bounded wait, SIGKILL; returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        await asyncio.to_thread(self.proc.stop)
        return self.proc.popen.returncode

    async def restart(self, timeout: float = READY_TIMEOUT_S) -> None:
        await self.stop()
        await self.start(timeout)
