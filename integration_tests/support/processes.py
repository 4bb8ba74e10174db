"""Running pipelines in their own process group, to be killed whole (driver JVM included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Collection

#: The repository's root: pipelines run as `python -m integration_tests.support.pipelines...`
#: from there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
        cwd=ROOT,
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


#: What a pipeline (integration_tests/support/pipelines/eos_pipeline.py) prints first: how its Python
#: workers start ("daemon" or "no-daemon"), so a test can count its runs of each kind.
WORKERS_LINE = "pipeline workers: {}\n"
#: Spark's words when a Python runner it started missed its fixed 10 s connect-back
#: (PythonWorkerFactory), and what the pipeline prints when it starts such a query again.
CONNECT_BACK = "Python worker failed to connect back"
RESTART_LINE = ("pipeline: query on {} started again: a Python runner of its driver missed "
                "Spark's 10 s connect-back")


def workers_args(run: int, no_daemon_runs: Collection[int]) -> list[str]:
    """The pipeline's arguments for run `run` of a kill sequence: `--no-daemon` (Python workers
    started as `python -m ...`, spark.python.use.daemon=false) for the runs in
    `no_daemon_runs`, Spark's default daemon otherwise. One sequence covers both ways of
    starting workers, instead of a second sequence of Spark starts for the other way."""
    return ["--no-daemon"] if run in no_daemon_runs else []


def run_kill_sequence(
    module: str, *args: str, log_path: str, points: list[str], first_batch: int = 1,
    env: dict[str, str] | None = None, after_each_kill: Callable[[str, int], None] | None = None,
    no_daemon_runs: Collection[int] = (),
    last_run_env: dict[str, str] | None = None,
) -> None:
    """A crash matrix as one sequence on one checkpoint: run k is killed (SIGKILL of its
    whole process group, from inside, by sinks/faults.py) at `points[k]` of batch
    `first_batch + k`, and run k+1 starts by recovering it; a last run (number
    `len(points)`) goes to the end. One Spark start per row instead of two; the runs in
    `no_daemon_runs` start their Python workers without Spark's daemon (`workers_args`).
    `last_run_env` is added to the last run's environment: a fault that does not kill (a
    task failure Spark retries) rides on the run that goes to the end, instead of a Spark
    start of its own."""
    from sinks.faults import ENV

    for run, point in enumerate(points):
        batch = first_batch + run
        proc = start_pipeline(module, *args, *workers_args(run, no_daemon_runs),
                              log_path=log_path, env={**(env or {}), ENV: f"{point}@{batch}"})
        rc = wait_exit(proc, log_path)
        assert rc == -signal.SIGKILL, f"the fault at {point}@{batch} should have killed the run:\n{log_tail(log_path)}"
        if after_each_kill is not None:
            after_each_kill(point, batch)
    run_pipeline(module, *args, *workers_args(len(points), no_daemon_runs), log_path=log_path,
                 env={**(env or {}), **(last_run_env or {})})


def run_session(python: str | os.PathLike, module: str, spec: dict, work: os.PathLike, *,
                env: dict[str, str], timeout_s: float, what: str) -> dict:
    """Run `python -m module SPEC RESULT` (a session that observes and leaves its observations
    in RESULT, as JSON) with its output in `work`/session.log, and return the observations;
    a session that fails or hangs fails the test with the end of its log."""
    import json
    from pathlib import Path

    import pytest

    work = Path(work)
    spec_path, result_path, log = work / "spec.json", work / "result.json", work / "session.log"
    spec_path.write_text(json.dumps(spec))
    with open(log, "w") as output:
        try:
            result = subprocess.run(
                [str(python), "-m", module, str(spec_path), str(result_path)],
                cwd=ROOT, env=env,
                stdout=output, stderr=subprocess.STDOUT, timeout=timeout_s)
            failure = f"failed (exit {result.returncode})" if result.returncode else ""
        except subprocess.TimeoutExpired:
            failure = f"did not end within {timeout_s} s"
    if failure:
        pytest.fail(f"{what} {failure}; its log ({log}) ends:\n"
                    f"{log.read_text(errors='replace')[-6000:]}")
    return json.loads(result_path.read_text())
