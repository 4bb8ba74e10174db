"""A real Confluent-compatible Schema Registry on loopback: Apicurio Registry, run from Maven Central.

Confluent's own registry is on neither Maven Central nor PyPI; Apicurio Registry (Apache-2.0)
is, and serves the Confluent API at `/apis/ccompat/v7`, which confluent-kafka's
`SchemaRegistryClient` and its Avro, Protobuf and JSON Schema serializers speak unchanged.
3.0.9 runs on Java 17 (3.3 needs Java 21), so it runs wherever the suite's Apache Kafka
does.

Its distribution (`io.apicurio:apicurio-registry-app:<version>:zip:all`, a runner jar and its
lib/) is fetched once into the jars' cache (`apache_kafka.cache_dir()`), with `mvn` where Maven
is installed, otherwise with the Ivy that PySpark ships. It runs with in-memory storage, HTTP on
127.0.0.1 only, global compatibility BACKWARD (Confluent's default; Apicurio's is NONE), content
ids as schema ids (legacy id mode off, as Confluent numbers them) and warnings-only logs, and it
dies with the process that started it. Given a PKI (`make_pki`: the tests' throwaway CA from
integration_tests/support/certs.py) it serves HTTPS only and requires basic auth
(`SchemaRegistry.client_config()` has the client's settings); the password stays in a mode-0700
config folder, off the command line.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import re
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from connectors.local.apache_kafka import (
    MakePKI,
    ServerPKI,
    cache_dir,
    die_with_parent,
    ivy_jar,
    stop_process,
)
from connectors.local.broker_handle import free_port, port_free

log = logging.getLogger(__name__)

VERSION = "3.0.9"
COORDINATES = f"io.apicurio:apicurio-registry-app:{VERSION}:zip:all"
RUNNER_JAR = f"apicurio-registry-app-{VERSION}-runner.jar"
CCOMPAT_PATH = "/apis/ccompat/v7"
MIN_JAVA = 17
COMPATIBILITY = "BACKWARD"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryUnavailable(RuntimeError):
    """The registry cannot run here; the message says what is missing."""


# -- distribution ------------------------------------------------------------------------------


def registry_distribution() -> Path:
    """The unpacked distribution (holding the runner jar), fetched on first use (about 110 MB).

    Idempotent; parallel callers (pytest -n workers on a fresh machine) wait for one fetch."""
    home = cache_dir() / "apicurio-registry" / VERSION
    app, done = home / "app", home / "complete"
    if done.exists():
        return app
    java_major()  # no download for a machine that could not run it
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return app
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=home))
        try:
            log.warning("fetching Apicurio Registry %s from Maven Central into %s (once)",
                        VERSION, app)
            archive = _fetch_archive(work)
            staging = work / "app"
            with zipfile.ZipFile(archive) as z:
                z.extractall(staging)
            if not (staging / RUNNER_JAR).is_file():
                raise RegistryUnavailable(f"{archive.name} holds no {RUNNER_JAR}")
            shutil.rmtree(app, ignore_errors=True)
            staging.rename(app)
            done.write_text(COORDINATES + "\n")
            return app
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _fetch_archive(work: Path) -> Path:
    """The distribution's zip, from Maven Central by mvn or else PySpark's Ivy."""
    errors = []
    resolvers = ([_fetch_with_maven] if shutil.which("mvn") else []) + [_fetch_with_ivy]
    for fetch in resolvers:
        out = work / f"download-{fetch.__name__}"
        try:
            fetch(out, work)
            found = sorted(out.glob("*.zip"))
            if found:
                return found[0]
            errors.append(f"{fetch.__name__}: no zip downloaded")
        except (RegistryUnavailable, subprocess.TimeoutExpired, OSError) as e:
            errors.append(str(e))
    raise RegistryUnavailable(
        f"cannot fetch {COORDINATES} from Maven Central"
        + ("" if shutil.which("mvn") else " (mvn is not installed; tried PySpark's Ivy)")
        + ": " + " | ".join(errors))


def _run_fetch(cmd: list[str], what: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RegistryUnavailable(f"{what} could not fetch {COORDINATES} (exit "
                                  f"{result.returncode}): {(result.stdout + result.stderr)[-1500:]}")


def _fetch_with_maven(out: Path, work: Path) -> None:
    _run_fetch(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={COORDINATES}",
                f"-DoutputDirectory={out}"], "mvn")


def _fetch_with_ivy(out: Path, work: Path) -> None:
    """Maven Central's default Ivy resolver, told not to read the pom: the artifact's parent pom
    (`io.apicurio:apicurio-registry`) is not published there, and Ivy stops at a missing parent
    where `mvn dependency:copy` does not."""
    ivy = ivy_jar()
    if ivy is None:
        raise RegistryUnavailable("neither mvn nor PySpark's Ivy jar is available")
    group, artifact, version, ext, classifier = COORDINATES.split(":")
    (work / "ivy.xml").write_text(
        '<ivy-module version="2.0" xmlns:m="http://ant.apache.org/ivy/maven">'
        '<info organisation="kafka-eos" module="registry"/><dependencies>'
        f'<dependency org="{group}" name="{artifact}" rev="{version}" transitive="false">'
        f'<artifact name="{artifact}" type="{ext}" ext="{ext}" m:classifier="{classifier}"/>'
        "</dependency></dependencies></ivy-module>\n")
    (work / "ivysettings.xml").write_text(
        '<ivysettings><settings defaultResolver="central"/><resolvers>'
        '<ibiblio name="central" m2compatible="true" usepoms="false"/>'
        "</resolvers></ivysettings>\n")
    _run_fetch(["java", "-jar", str(ivy), "-settings", str(work / "ivysettings.xml"),
                "-ivy", str(work / "ivy.xml"), "-cache",
                str(work / "ivy-cache"), "-retrieve",
                f"{out}/[artifact]-[revision](-[classifier]).[ext]", "-confs", "default"],
               "PySpark's Ivy")


def java_major() -> int:
    """The major version of the `java` on PATH; RegistryUnavailable below Java 17 or without."""
    if shutil.which("java") is None:
        raise RegistryUnavailable(f"Apicurio Registry needs Java {MIN_JAVA}+ on PATH "
                                  "(java not found)")
    result = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if not found:
        raise RegistryUnavailable(f"cannot tell java's version: {result.stderr[-300:]}")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0_..."
        major = int(found.group(2))
    if major < MIN_JAVA:
        raise RegistryUnavailable(f"Apicurio Registry {VERSION} needs Java {MIN_JAVA}+; the "
                                  f"java on PATH is {major}")
    return major


# -- the server ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistrySecurity:
    """A secured registry's TLS and basic-auth material (`schema_registry(make_pki=...)`)."""

    ca_location: str
    username: str
    password: str = field(repr=False)
    #: A CA that did not sign the server's certificate (for a client's refusal).
    other_ca_location: str = ""


def _server_properties(port: int, management_port: int,
                       security: RegistrySecurity | None,
                       pki: ServerPKI | None) -> dict[str, str]:
    props = {
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": str(port),
        # Unused by 3.0.x (health is on the HTTP port); were it on, it binds every interface.
        "quarkus.management.host": "127.0.0.1",
        "quarkus.management.port": str(management_port),
        # The rule applied when none is configured; /config reports it only once set (start()).
        "apicurio.rules.global.compatibility": COMPATIBILITY,
        "apicurio.ccompat.legacy-id-mode.enabled": "false",
        "quarkus.banner.enabled": "false",
        "quarkus.http.access-log.enabled": "false",
        "quarkus.log.level": "WARN",
        'quarkus.log.category."io.apicurio".level': "WARN",
    }
    if security is not None and pki is not None:
        props.update({
            # HTTPS only, on the port the caller asked for; plain HTTP takes a throwaway port.
            "quarkus.http.ssl-port": str(port),
            "quarkus.http.port": str(free_port()),
            "quarkus.http.insecure-requests": "disabled",
            "quarkus.http.ssl.certificate.files": pki.server_cert_pem,
            "quarkus.http.ssl.certificate.key-files": pki.server_key_pem,
            # Basic auth against one embedded user, on every API path.
            "quarkus.http.auth.basic": "true",
            "quarkus.security.users.embedded.enabled": "true",
            "quarkus.security.users.embedded.plain-text": "true",
            f"quarkus.security.users.embedded.users.{security.username}": security.password,
            "quarkus.http.auth.permission.registry.paths": "/apis/*",
            "quarkus.http.auth.permission.registry.policy": "authenticated",
        })
    return props


def _jvm_command(app: Path) -> list[str]:
    # C1 only and a serial collector: less CPU for a start on a loaded 2-core machine; a
    # registry serves a few schema look-ups per query, never a hot path. The settings are in
    # config/application.properties of the working directory (Quarkus reads it): the password
    # of a secured one stays off the command line.
    return ["java", "-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true", "-jar", str(app / RUNNER_JAR)]


def _properties_text(props: dict[str, str]) -> str:
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")

    return "".join(f"{escape(k)}={escape(v)}\n" for k, v in props.items())


@dataclass
class SchemaRegistry:
    """A running Apicurio Registry (`schema_registry()`)."""

    port: int
    workdir: Path
    security: RegistrySecurity | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The Confluent API's base URL: `schema.registry.url`, `SchemaRegistryClient`'s url."""
        scheme = "https" if self.security else "http"
        return f"{scheme}://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    def client_config(self) -> dict[str, str]:
        """`SchemaRegistryClient`'s configuration (the `schema.registry.` options without the
        prefix): the url, and for a secured registry its CA and basic-auth credentials."""
        conf = {"url": self.url}
        if self.security:
            conf.update({"ssl.ca.location": self.security.ca_location,
                         "basic.auth.user.info":
                             f"{self.security.username}:{self.security.password}"})
        return conf

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / "registry.log").read_text(errors="replace")[-chars:]
        return ""

    def request(self, path: str, method: str = "GET", body: dict | None = None,
                timeout_s: float = 5.0) -> tuple[int, object]:
        """(HTTP status, decoded JSON answer) of one Confluent API call, as a client with this
        registry's credentials makes it."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE}
        context = None
        if self.security:
            context = ssl.create_default_context(cafile=self.security.ca_location)
            token = f"{self.security.username}:{self.security.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s; idempotent."""
        if self.process is None:
            return
        stop_process(self.process)
        self.process = None


def _wait_until_ready(registry: SchemaRegistry, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if not registry.alive():
            raise RegistryUnavailable(f"Apicurio Registry exited (status "
                                      f"{registry.process.poll()}):\n{registry.log_tail()}")
        try:
            status, _ = registry.request("/subjects", timeout_s=2)
            if status == 200:
                return
            last = f"HTTP {status}"
        except (OSError, ValueError) as e:
            last = str(e)
        time.sleep(0.25)
    raise RegistryUnavailable(f"Apicurio Registry did not answer at {registry.url} within "
                              f"{timeout_s:.0f} s ({last}):\n{registry.log_tail()}")


def start_registry(port: int | None = None, *, make_pki: MakePKI | None = None,
                   timeout_s: float = 120) -> SchemaRegistry:
    """Fetch (once) and start a registry on 127.0.0.1:`port` (a free one if None); returns once
    the Confluent API answers and global compatibility is BACKWARD. The caller stops it
    (`stop_registry`). `make_pki`: HTTPS only, with the PKI it makes in the registry's
    directory, and basic auth."""
    java_major()
    if port and not port_free(port):
        raise RegistryUnavailable(f"port {port} is in use on 127.0.0.1 (another registry?): "
                                  "choose another with --port, or --port 0 for any free one")
    app = registry_distribution()
    for attempt in range(3):
        # A free port may be taken between picking and binding on a busy machine: pick again.
        chosen = port or free_port()
        workdir = Path(tempfile.mkdtemp(prefix="apicurio-registry-"))
        security, pki = None, None
        if make_pki is not None:
            pki = make_pki(str(workdir / "pki"))
            security = RegistrySecurity(pki.ca_pem, "registry-user", secrets.token_urlsafe(16),
                                        getattr(pki, "other_ca_pem", ""))
        config = workdir / "config"
        config.mkdir(mode=0o700)
        props = _server_properties(chosen, free_port(), security, pki)
        (config / "application.properties").write_text(_properties_text(props))
        registry = SchemaRegistry(chosen, workdir, security)
        with open(workdir / "registry.log", "ab") as out:
            registry.process = subprocess.Popen(
                _jvm_command(app), cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
        try:
            _wait_until_ready(registry, timeout_s)
            _set_global_compatibility(registry)
            log.info("Apicurio Registry %s at %s (pid %d)", VERSION, registry.url, registry.pid)
            return registry
        except BaseException as e:
            stop_registry(registry)
            if attempt == 2 or port or not _port_taken(e):
                raise
            log.warning("Apicurio Registry: port %d was taken meanwhile; starting again", chosen)
    raise AssertionError("unreachable")


def _port_taken(error: BaseException) -> bool:
    """Quarkus's words for a port another process bound first."""
    return isinstance(error, RegistryUnavailable) and (
        "in use by another process" in str(error) or "Address already in use" in str(error))


def _set_global_compatibility(registry: SchemaRegistry) -> None:
    """As Confluent's registry has it. The start-up setting already enforces it; this makes the
    Confluent API's /config report it too."""
    status, answer = registry.request("/config", "PUT", {"compatibility": COMPATIBILITY})
    if status != 200 or not isinstance(answer, dict) or \
            answer.get("compatibilityLevel") != COMPATIBILITY:
        raise RegistryUnavailable(f"setting global compatibility {COMPATIBILITY} failed: HTTP "
                                  f"{status} {answer}")


def stop_registry(registry: SchemaRegistry) -> None:
    """Stop it and delete its working directory (its certificates included)."""
    registry.stop()
    shutil.rmtree(registry.workdir, ignore_errors=True)


@contextlib.contextmanager
def schema_registry(port: int | None = None, *, make_pki: MakePKI | None = None,
                    progress: Callable[[str], None] | None = None) -> Iterator[SchemaRegistry]:
    """A registry for the block: fetched once, started, stopped (with its data) on exit.
    `progress` hears the slow steps (a first fetch, the JVM's start)."""
    if progress:
        if not (cache_dir() / "apicurio-registry" / VERSION / "complete").exists():
            progress(f"fetching Apicurio Registry {VERSION} from Maven Central into "
                     f"{cache_dir()} (once, about 110 MB)")
        progress(f"starting Apicurio Registry {VERSION}")
    registry = start_registry(port, make_pki=make_pki)
    try:
        yield registry
    finally:
        stop_registry(registry)
