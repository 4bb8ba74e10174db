"""Running pipelines in their own process group, to be killed whole (driver JVM included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def start_pipeline(module: str, *args: str, log_path: str) -> subprocess.Popen:
    log = open(log_path, "ab")
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
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


def run_pipeline(module: str, *args: str, log_path: str, timeout_s: float = 600) -> None:
    proc = start_pipeline(module, *args, log_path=log_path)
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise AssertionError(f"{module} did not finish within {timeout_s}s; see {log_path}")
    if rc != 0:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        raise AssertionError(f"{module} exited with {rc}:\n{tail}")
