"""Client for the upstream-allocator oracle (bench/oracle/main.go).

The oracle is a Go program over k8s.io/dynamic-resource-allocation that answers, for a
case of plain Kubernetes JSON objects, what kube-scheduler's allocator answers. It speaks
JSON Lines: one case in, one answer out, in order (protocol in README.md).

    with Oracle.start() as oracle:
        answer = oracle.ask({"id": "x", "mode": "node", "node": ..., "slices": [...], ...})
        answers = oracle.ask_many(cases)   # pipelined

Only the standard library is used.
"""

from __future__ import annotations

import datetime
import json
import os
import queue
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"

#: Seconds to wait for one answer (the oracle itself gives up on one Allocate after 10 s
#: unless the case sets timeout_ms).
DEFAULT_TIMEOUT = 120.0
#: Seconds allowed for building the binary from a cold cache (two cores: about 2-4 min).
BUILD_TIMEOUT = 1200.0

_EOF = object()


class OracleError(RuntimeError):
    """The oracle could not be built, died, or did not answer in time."""


def go_available() -> bool:
    return shutil.which("go") is not None


#: The Kubernetes minor versions the oracle is built for (build.sh, FITGATE_ORACLE_KUBE).
KUBE_VERSIONS = ("1.36", "1.37")


def kube_versions() -> list[str]:
    """The versions the oracle tests run on: $FITGATE_ORACLE_KUBE_VERSIONS (comma
    separated), default all of KUBE_VERSIONS."""
    raw = os.environ.get("FITGATE_ORACLE_KUBE_VERSIONS", ",".join(KUBE_VERSIONS))
    return [v.strip() for v in raw.split(",") if v.strip()]


def build(timeout: float = BUILD_TIMEOUT, kube: str = "1.36") -> Path:
    """Build the oracle for a Kubernetes minor version if needed (cached under
    FITGATE_CACHE) and return the binary's path."""
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "FITGATE_ORACLE_KUBE": kube},
        )
    except subprocess.TimeoutExpired as exc:
        raise OracleError(f"building the oracle took more than {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise OracleError(f"build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise OracleError("build.sh printed no path")
    path = Path(lines[-1])
    if not os.access(path, os.X_OK):
        raise OracleError(f"build.sh printed {path}, which is not an executable")
    return path


class Oracle:
    """A running oracle process. Not thread-safe: one caller at a time."""

    def __init__(self, path: Path | str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.kube = "1.36"  # the Kubernetes minor version the binary follows
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._answers: queue.Queue[object] = queue.Queue()
        self._stderr: deque[bytes] = deque(maxlen=200)
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @classmethod
    def start(cls, path: Path | str | None = None, timeout: float = DEFAULT_TIMEOUT,
              kube: str = "1.36") -> Oracle:
        """Start the oracle at path; default: $FITGATE_ORACLE (1.36) or
        $FITGATE_ORACLE_1_37 (1.37), else build it for `kube` with build.sh."""
        if path is None:
            env = "FITGATE_ORACLE" if kube == "1.36" else "FITGATE_ORACLE_" + kube.replace(".", "_")
            path = os.environ.get(env) or build(kube=kube)
        oracle = cls(path, timeout)
        oracle.kube = kube
        return oracle

    # -- the protocol -------------------------------------------------------------------

    def ask(self, case: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one case and return its answer."""
        return self.ask_many([case], timeout)[0]

    def ask_many(
        self, cases: Iterable[dict[str, Any]], timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """Send all cases at once (a writer thread feeds them) and return the answers in order.

        timeout bounds the wait for each answer. On a timeout the process is killed.
        """
        proc = self._running()
        assert proc.stdin is not None
        lines = [_encode(case) for case in cases]
        write_error: list[BaseException] = []

        def write() -> None:
            try:
                for line in lines:
                    proc.stdin.write(line)  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, OSError, ValueError) as exc:
                write_error.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        answers = []
        try:
            for _ in lines:
                answers.append(self._next_answer(self.timeout if timeout is None else timeout))
        finally:
            writer.join(timeout=5)
        if write_error:
            raise OracleError(f"writing to the oracle failed: {write_error[0]}")
        return answers

    def info(self) -> dict[str, Any]:
        """Module versions, Go version and default features of the running binary."""
        return self.ask({"id": "info", "mode": "info"})

    # -- lifecycle ------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Close stdin, let the process exit (kill it after timeout), release the pipes."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
        for thread in self._threads:
            thread.join(timeout=timeout)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Oracle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def stderr(self) -> str:
        """The last lines the oracle wrote to stderr."""
        return b"".join(self._stderr).decode(errors="replace")

    # -- internals ------------------------------------------------------------------------

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise OracleError("the oracle is closed")
        if self._proc.poll() is not None:
            raise OracleError(f"the oracle exited ({self._proc.returncode}): {self.stderr}")
        return self._proc

    def _next_answer(self, timeout: float) -> dict[str, Any]:
        try:
            item = self._answers.get(timeout=timeout)
        except queue.Empty:
            self._kill()
            raise OracleError(f"no answer from the oracle within {timeout:.0f}s") from None
        if item is _EOF:
            raise OracleError(f"the oracle closed its output: {self.stderr}")
        assert isinstance(item, bytes)
        answer = json.loads(item)
        assert isinstance(answer, dict)
        return answer

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self.close()

    def _read_stdout(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        try:
            for line in proc.stdout:
                self._answers.put(line)
        except (OSError, ValueError):
            pass
        self._answers.put(_EOF)

    def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        try:
            for line in proc.stderr:
                self._stderr.append(line)
        except (OSError, ValueError):
            pass


def _encode(case: dict[str, Any]) -> bytes:
    return json.dumps(case, separators=(",", ":"), default=_json_default).encode() + b"\n"


def _json_default(value: object) -> str:
    """Timestamps (as PyYAML loads them) become RFC 3339 strings, as the API writes them."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"cannot send {type(value).__name__} to the oracle")
