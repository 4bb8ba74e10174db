"""Running pipelines in their own process group, to be killed whole (driver JVM included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def start_pipeline(
    module: str, *args: str, log_path: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    log = open(log_path, "ab")
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        start_new_session=True,  # a process group of its own: killpg reaches the JVM too
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the pipeline's whole process group: no clean-up runs anywhere."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def wait_exit(proc: subprocess.Popen, log_path: str, timeout_s: float = 600) -> int:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(f"pipeline did not finish within {timeout_s}s; see {log_path}")


def log_tail(log_path: str, chars: int = 4000) -> str:
    with open(log_path, errors="replace") as f:
        return f.read()[-chars:]


def run_pipeline(
    module: str, *args: str, log_path: str, timeout_s: float = 600,
    env: dict[str, str] | None = None,
) -> None:
    """Run to completion; fail with the log's tail if it does not exit cleanly."""
    proc = start_pipeline(module, *args, log_path=log_path, env=env)
    rc = wait_exit(proc, log_path, timeout_s)
    if rc != 0:
        raise AssertionError(f"{module} exited with {rc}:\n{log_tail(log_path)}")
