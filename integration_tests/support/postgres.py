"""A throwaway PostgreSQL server for tests and demos of the `postgres-eos` sink.

`initdb` into a temporary directory, then `postgres` on a free loopback port (no Unix socket),
password authentication for the superuser, `max_prepared_transactions` above 0 (PREPARE
TRANSACTION is the sink's first phase). Debian's `postgresql` package provides the binaries
(`/usr/lib/postgresql/<version>/bin`); `.ci/run` installs it when it is missing.

`initdb` and `postgres` refuse to run as root. When the tests run as root, the server runs as
the unprivileged `postgres` system user (which Debian's package creates), owning the temporary
directory. `unavailable_reason()` says why no server can be started, for skip messages.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote

from connectors.local.broker_handle import free_port

#: Where a server runs when the tests run as root.
SERVICE_USER = "postgres"
#: A directory holding `initdb` and `postgres`, to use instead of the newest Debian install.
BINDIR_ENV = "POSTGRES_BINDIR"


@dataclass
class PostgresServer:
    """A running throwaway server; `url()` is a libpq URI for its superuser."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    dbname: str
    version: str
    data_dir: str
    pid: int  # the postmaster; its backends share its process group (see freeze())

    def url(self, *, password: str | None = None, dbname: str | None = None, **params: str) -> str:
        """postgresql://user:password@host:port/db?params (password defaults to the real one)."""
        pw = self.password if password is None else password
        query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
        return (
            f"postgresql://{quote(self.user, safe='')}:{quote(pw, safe='')}@{self.host}:{self.port}"
            f"/{quote(dbname or self.dbname, safe='')}" + (f"?{query}" if query else "")
        )

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every backend: the server hangs, connections stay open."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)


def _version_key(bindir: str) -> tuple[int, ...]:
    m = re.search(r"/postgresql/(\d+(?:\.\d+)*)/bin", bindir)
    return tuple(int(x) for x in m.group(1).split(".")) if m else (0,)


def find_bindir() -> str | None:
    """The directory of `initdb` and `postgres`: $POSTGRES_BINDIR, else the newest Debian
    install, else `initdb` on PATH."""
    candidates = [os.environ[BINDIR_ENV]] if os.environ.get(BINDIR_ENV) else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.dirname(on_path))
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "postgres")):
            return d
    return None


def _run_as() -> tuple[str | None, str | None]:
    """(user to run the server as, or None for this process's user; why not possible)."""
    if os.geteuid() != 0:
        return None, None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        return None, (
            f"running as root, and there is no unprivileged '{SERVICE_USER}' user to run "
            "PostgreSQL as (initdb and postgres refuse root)"
        )
    return SERVICE_USER, None


def unavailable_reason() -> str | None:
    """None if a throwaway server can be started here; otherwise why not."""
    if find_bindir() is None:
        return (
            "no PostgreSQL binaries (initdb, postgres): install Debian's 'postgresql' package "
            f"(.ci/run does), or set {BINDIR_ENV}"
        )
    return _run_as()[1]


def _wait_ready(server: PostgresServer, proc: subprocess.Popen, log_path: str, timeout_s: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with status {proc.returncode}:\n{_tail(log_path)}")
        try:
            with psycopg.connect(server.url(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as e:
            last = e
            time.sleep(0.1)
    raise RuntimeError(f"PostgreSQL not ready after {timeout_s}s: {last}\n{_tail(log_path)}")


def _tail(path: str, chars: int = 3000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


@contextlib.contextmanager
def postgres_server(
    *, max_prepared_transactions: int = 64, settings: Mapping[str, str] | None = None,
    start_timeout_s: float = 60, host: str = "127.0.0.1",
) -> Iterator[PostgresServer]:
    """Start a throwaway server on `host` (loopback unless a lab's hosts must reach it); stop it
    (fast shutdown) and delete its directory on exit."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    bindir = find_bindir()
    assert bindir is not None
    user, _ = _run_as()
    base = tempfile.mkdtemp(prefix="pg-eos-test-")
    data_dir = os.path.join(base, "data")
    log_path = os.path.join(base, "postgres.log")
    password = secrets.token_urlsafe(16)
    pwfile = os.path.join(base, "pwfile")
    with open(pwfile, "w") as f:
        f.write(password + "\n")
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (base, pwfile):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    as_user = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []} if user else {}

    initdb = subprocess.run(
        [
            os.path.join(bindir, "initdb"), "-D", data_dir, "-U", "postgres",
            "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-locale",
            "--no-sync",
        ],
        capture_output=True, text=True, **as_user,
    )
    if initdb.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({initdb.returncode}): {initdb.stderr[-2000:]}")
    if host != "127.0.0.1":  # initdb's pg_hba.conf admits loopback only: a lab's hosts too
        with open(os.path.join(data_dir, "pg_hba.conf"), "a") as f:
            f.write(f"host all all {host.rsplit('.', 1)[0]}.0/24 scram-sha-256\n")
    version = subprocess.run(
        [os.path.join(bindir, "postgres"), "--version"], capture_output=True, text=True
    ).stdout.strip()

    port = free_port()
    conf = {
        "listen_addresses": host,
        "port": str(port),
        "unix_socket_directories": "",  # loopback TCP only: no socket file anywhere
        "max_prepared_transactions": str(max_prepared_transactions),
        "max_connections": "100",
        "shared_buffers": "32MB",
        "logging_collector": "off",
        **dict(settings or {}),
    }
    args = [os.path.join(bindir, "postgres"), "-D", data_dir]
    for k, v in conf.items():
        args += ["-c", f"{k}={v}"]
    log_file = open(log_path, "ab")
    proc = subprocess.Popen(
        args, stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: a pipeline's killpg never reaches it
        **as_user,
    )
    server = PostgresServer(
        host=host, port=port, user="postgres", password=password, dbname="postgres",
        version=version, data_dir=data_dir, pid=proc.pid,
    )
    try:
        _wait_ready(server, proc, log_path, start_timeout_s)
        yield server
    finally:
        _stop(proc)
        log_file.close()
        shutil.rmtree(base, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    """Fast shutdown (SIGINT; the postmaster exits after its backends). A server that does not
    stop in time is killed with its backends (its process group)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)  # in case a test left it frozen
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
            return
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# -- reading back, independently of the sink ------------------------------------------------


def query(server: PostgresServer, statement: str, params: tuple | list | None = None) -> list[tuple]:
    """Rows of one statement on a fresh autocommit connection."""
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def prepared_transactions(server: PostgresServer) -> list[tuple[str, str]]:
    """(gid, database) of every prepared transaction on the server."""
    return query(server, "SELECT gid, database FROM pg_prepared_xacts ORDER BY gid")
