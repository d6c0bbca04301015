"""Start, watch and stop the control plane's local processes.

Every component runs in a session (and process group) of its own, with its output in
``<workdir>/logs/<name>.log``; its pid is recorded in ``<workdir>/pids/<name>`` so that a
later ``down`` can end what an aborted run left behind — only those pids, and only if the
process still runs the binary we started. Stopping is SIGTERM to the group, a bounded
wait, then SIGKILL: nothing survives a teardown. Each child also asks the kernel for
SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), which covers a test run that is
killed outright.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable

STOP_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the parent dies (Linux prctl), so a
    killed test run (even SIGKILL) leaves no component behind."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


#: Ports below the kernel's ephemeral range that free_port chooses from.
_LOWEST_PORT = 10000
_given: set[int] = set()  # ports this process has handed out


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The ports the kernel picks source ports (and `bind(0)`) from."""
    try:
        low, high = (int(w) for w in pathlib.Path(path).read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for a component to bind later.

    Chosen at random below the kernel's ephemeral range, never twice in this process: the
    kernel gives outgoing connections source ports from that range only, so none can
    take the port between now and the component's bind (a port from `bind(0)` could, and
    did: kueue exited with "address already in use" on a busy machine). Falls back to the
    kernel's choice if no port below the range is free."""
    low, _ = ephemeral_range()
    for _ in range(500 if low > _LOWEST_PORT + 100 else 0):
        port = random.randrange(_LOWEST_PORT, low)
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    _given.add(port)
    return port


class Process:
    """One running component."""

    def __init__(self, name: str, argv: list[str], workdir: pathlib.Path,
                 env: dict[str, str] | None = None, exe: str | None = None,
                 log_dir: pathlib.Path | None = None, cwd: pathlib.Path | None = None
                 ) -> None:
        """Start ``argv``; ``exe`` is the binary that ends up running when ``argv`` is a
        wrapper that execs it (what ``kill_recorded`` checks the pid against)."""
        self.name = name
        self.argv = argv
        self.env = env
        self.exe = exe or argv[0]
        self.log_path = (log_dir or workdir / "logs") / f"{name}.log"
        self.pid_path = workdir / "pids" / name
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.pid_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"# {' '.join(argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          preexec_fn=_die_with_parent,
                                          cwd=cwd or workdir,
                                          env={**os.environ, **(env or {})})
        self.pid_path.write_text(f"{self.popen.pid} {self.exe}\n")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the process group, wait, then SIGKILL it; forget the pid file."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=STOP_GRACE_S)
        # No signal after the leader is reaped: its pid (and group id) may be reused by
        # then. The components start no children of their own.
        self.pid_path.unlink(missing_ok=True)


def kill_recorded(workdir: pathlib.Path) -> list[str]:
    """End processes an earlier run recorded in ``workdir/pids`` and that still run."""
    ended: list[str] = []
    pids = workdir / "pids"
    if not pids.is_dir():
        return ended
    for record in sorted(pids.iterdir()):
        try:
            pid_text, exe = record.read_text().split(maxsplit=1)
            pid = int(pid_text)
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except (OSError, ValueError):
            record.unlink(missing_ok=True)
            continue
        if cmdline.decode(errors="replace") == exe.strip():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            ended.append(f"{record.name} (pid {pid})")
        record.unlink(missing_ok=True)
    return ended


def https_context(ca: pathlib.Path | None, cert: pathlib.Path | None = None,
                  key: pathlib.Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def probe(url: str, context: ssl.SSLContext | None = None, timeout: float = 3.0) -> bool:
    """True if ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def wait_until(what: str, check: Callable[[], bool], timeout: float,
               process: Process | None = None, interval: float = 0.5) -> None:
    """Poll ``check`` until it holds; fail early if ``process`` died; bounded in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if process is not None and not process.alive():
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode} while "
                               f"waiting for {what}; last log lines "
                               f"({process.log_path}):\n{process.log_tail()}")
        time.sleep(interval)
    tail = f"; last log lines ({process.log_path}):\n{process.log_tail()}" if process else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
