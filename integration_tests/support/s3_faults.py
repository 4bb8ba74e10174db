"""A fault-injecting HTTP proxy in front of the suite's S3 server (moto): object storage that
fails for a while.

    with S3FaultProxy(s3.endpoint) as proxy:         # s3: integration_tests.support.s3.S3Server
        env = proxy.env                              # the standard AWS environment, via the proxy
        proxy.set_faults(error_rate=0.2, reset_rate=0.05, delay_rate=0.05, delay_s=6)
        ...                                          # a query commits through proxy.endpoint
        proxy.outage(True); ...; proxy.outage(False) # every request refused for a while
        proxy.counts                                 # what was injected, by kind

Requests are forwarded byte for byte, the `Host` header as the client sent it (the proxy's
address): S3's signature covers it, and moto's server mode checks no signature (moto 5.2:
`INITIAL_NO_AUTH_ACTION_COUNT` is infinite unless set), so the request moto sees is exactly the
one the client signed. Responses are relayed byte for byte too, except interim `100 Continue`
answers, which the proxy gives the client itself (it must hold the whole request before it
decides a fault).

The faults (`set_faults`), each counted in `counts`, are dealt to the requests from a shuffled
deck of DECK requests that holds each fault in its share (seeded: `S3FaultProxy(seed=...)`),
so that N requests get N x rate of each, give or take a deck, not a number left to chance:

* `error_503`, `error_500`: a `503 SlowDown` or a `500 InternalError` (S3's XML error body),
  half each of `error_rate`; the request never reaches moto;
* `reset_before`, `reset_after`: the connection reset (TCP RST) before the request is
  forwarded, or after moto answered it (the request took effect, its answer is lost: the
  ambiguous case); half each of `reset_rate`;
* `delay`: forwarded, and moto's answer held for `delay_s` (past the client's timeout, so the
  client gives up on a request that took effect) before it is relayed.

`fail_next(target, kind)` gives one fault to the next request whose path contains `target`
(e.g. the PUT of one Delta commit), whatever the mix: a commit that lands while its client is
told it failed, on purpose rather than by chance.

`outage(True)` fails every request until `outage(False)`: each one answered `503 SlowDown` or
reset, alternately (`outage_503`, `outage_reset`). Nothing of the fault mix is drawn meanwhile. `arm_outage(target)` starts one the moment
moto has answered the first request whose path contains `target` (e.g. the first data file of
a batch: the outage then falls among that batch's tasks); `outage_started` says when
(time.monotonic()).

Test plumbing only: standard library, threads (one per client connection).
"""

from __future__ import annotations

import collections
import random
import socket
import socketserver
import struct
import threading
import time
import uuid
from dataclasses import dataclass

_MAX_HEAD = 64 * 1024
#: Requests per shuffled deck of faults.
DECK = 100


@dataclass(frozen=True)
class FaultMix:
    error_rate: float = 0.0
    reset_rate: float = 0.0
    delay_rate: float = 0.0
    delay_s: float = 0.0
    #: Only requests whose method is in this set get faults (None: every request).
    methods: frozenset[str] | None = None
    #: Only requests whose target (path and query) contains this get faults (None: every one).
    target: str | None = None


class _Closed(Exception):
    """The peer closed the connection (between requests: the normal end)."""


def _read_head(reader) -> bytes:
    """An HTTP message's head, through the blank line, as received."""
    lines = []
    size = 0
    while True:
        line = reader.readline(_MAX_HEAD)
        if not line:
            if lines:
                raise ConnectionError("connection closed inside an HTTP head")
            raise _Closed()
        if not lines and line in (b"\r\n", b"\n"):
            continue  # stray CRLF between messages
        lines.append(line)
        size += len(line)
        if size > _MAX_HEAD:
            raise ConnectionError("HTTP head too long")
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    text = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in text[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.strip()
    return text[0], fields


def _read_body(reader, fields: dict[str, str], *, until_close: bool = False) -> bytes:
    """The body as received (chunked: the chunks with their framing and trailers)."""
    if "chunked" in fields.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size_line = reader.readline(_MAX_HEAD)
            if not size_line:
                raise ConnectionError("connection closed inside a chunked body")
            parts.append(size_line)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = reader.readline(_MAX_HEAD)
                    if not trailer:
                        raise ConnectionError("connection closed inside chunked trailers")
                    parts.append(trailer)
                    if trailer in (b"\r\n", b"\n"):
                        return b"".join(parts)
            parts.append(_read_exactly(reader, size + 2))  # data and its CRLF
    length = fields.get("content-length")
    if length is not None:
        return _read_exactly(reader, int(length))
    if until_close:
        return reader.read()
    return b""


def _read_exactly(reader, n: int) -> bytes:
    data = reader.read(n)
    if len(data) != n:
        raise ConnectionError(f"connection closed after {len(data)} of {n} body bytes")
    return data


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a load balancer dropping the connection does."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _error_response(status: int, code: str, message: str, *, close: bool) -> bytes:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{uuid.uuid4().hex[:16].upper()}</RequestId></Error>"
    ).encode()
    reason = {500: "Internal Server Error", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"x-amz-request-id: {uuid.uuid4().hex[:16].upper()}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    ).encode()
    return head + body


SLOW_DOWN = (503, "SlowDown", "Please reduce your request rate.")
INTERNAL_ERROR = (500, "InternalError", "We encountered an internal error. Please try again.")


class S3FaultProxy:
    """An HTTP/1.1 proxy on a loopback port that forwards to `upstream` (moto's endpoint,
    `http://host:port`) and injects faults; see the module's docstring."""

    def __init__(self, upstream: str, *, seed: int | None = None) -> None:
        hostport = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self.upstream = (host, int(port))
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._mix = FaultMix()
        self._outage = False
        self._outage_flip = False
        self._deck: list[str | None] = []
        self._armed: str | None = None
        self._one_shots: list[tuple[str, str | None, str, float]] = []
        self.outage_started: float | None = None
        self._stopping = threading.Event()
        self.counts: collections.Counter[str] = collections.Counter()
        #: (monotonic time, kind, "METHOD /path") of every fault injected, in order.
        self.events: list[tuple[float, str, str]] = []
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="s3-fault-proxy", daemon=True)

    # -- control ----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS environment (integration_tests/support/s3.py), pointed at the proxy."""
        from integration_tests.support.s3 import S3Server

        return S3Server(self.endpoint).env

    @property
    def storage_options(self) -> dict[str, str]:
        from integration_tests.support.s3 import S3Server

        return S3Server(self.endpoint).storage_options

    def set_faults(self, error_rate: float = 0.0, reset_rate: float = 0.0,
                   delay_rate: float = 0.0, delay_s: float = 0.0,
                   methods: set[str] | None = None, target: str | None = None) -> None:
        """The share of requests answered with an error, reset, or delayed past `delay_s`
        (see the module's docstring); `methods`: only these get faults; `target`: only
        requests whose path contains it. All zero: none."""
        if error_rate + reset_rate + delay_rate > 1:
            raise ValueError("the fault rates add up to more than 1")
        with self._lock:
            self._mix = FaultMix(error_rate, reset_rate, delay_rate, delay_s,
                                 frozenset(m.upper() for m in methods) if methods else None,
                                 target)
            self._deck = []

    def outage(self, on: bool) -> None:
        """Every request fails (503 SlowDown or a reset, alternately) until `outage(False)`."""
        with self._lock:
            self._start_outage(on, "")

    def _start_outage(self, on: bool, what: str) -> None:  # under self._lock
        if on and not self._outage:
            self.outage_started = time.monotonic()
        self._outage = on
        self._armed = None
        self._note("outage_start" if on else "outage_end", what)

    def fail_next(self, target: str, kind: str, *, method: str | None = None,
                  delay_s: float = 0.0) -> None:
        """The next request whose path contains `target` (and whose method is `method`, if
        given) gets the fault `kind` (error_503, error_500, reset_before, reset_after, delay
        for `delay_s`)."""
        if kind not in ("error_503", "error_500", "reset_before", "reset_after", "delay"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._one_shots.append((target, method.upper() if method else None, kind, delay_s))

    def pending_one_shots(self) -> list[tuple[str, str]]:
        """The fail_next faults not dealt yet: (target, kind)."""
        with self._lock:
            return [(t, k) for t, _, k, _ in self._one_shots]

    def arm_outage(self, target: str) -> None:
        """Start an outage right after the first request whose path contains `target`."""
        with self._lock:
            self._armed = target

    @property
    def in_outage(self) -> bool:
        return self._outage

    def faults(self) -> int:
        """Faults injected so far (outage refusals included)."""
        with self._lock:
            return sum(n for k, n in self.counts.items() if k.startswith(("error_", "reset_", "delay", "outage_")) and k not in ("outage_start", "outage_end"))

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def start(self) -> "S3FaultProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "S3FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- serving ----------------------------------------------------------------------------

    def _note(self, kind: str, what: str) -> None:  # under self._lock
        self.counts[kind] += 1
        if kind not in ("requests", "forwarded"):
            self.events.append((time.monotonic(), kind, what))

    def _count(self, kind: str, what: str = "") -> None:
        with self._lock:
            self._note(kind, what)

    def _decide(self, method: str, target: str) -> tuple[str | None, float]:
        """The fault for one request (or None), and how long a `delay` holds the answer."""
        with self._lock:
            if self._outage:
                self._outage_flip = not self._outage_flip
                return ("outage_503" if self._outage_flip else "outage_reset"), 0.0
            for i, (t, m, kind, delay_s) in enumerate(self._one_shots):
                if t in target and (m is None or m == method):
                    del self._one_shots[i]
                    return kind, delay_s
            mix = self._mix
            if mix.methods is not None and method not in mix.methods:
                return None, 0.0
            if mix.target is not None and mix.target not in target:
                return None, 0.0
            if not self._deck:
                self._deck = self._new_deck(mix)
            return self._deck.pop(), mix.delay_s

    def _new_deck(self, mix: FaultMix) -> list[str | None]:
        def split(n: int, a: str, b: str) -> list[str]:
            return [a if i % 2 == 0 else b for i in range(n)]

        errors, resets = round(mix.error_rate * DECK), round(mix.reset_rate * DECK)
        delays = round(mix.delay_rate * DECK)
        deck: list[str | None] = [*split(errors, "error_503", "error_500"),
                                  *split(resets, "reset_before", "reset_after"),
                                  *["delay"] * delays]
        deck += [None] * (DECK - len(deck))
        self._rng.shuffle(deck)
        return deck

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        upstream: socket.socket | None = None
        up_reader = None
        try:
            while not self._stopping.is_set():
                try:
                    head = _read_head(reader)
                except _Closed:
                    return
                request_line, fields = _headers(head)
                method = request_line.split(" ", 1)[0].upper()
                what = " ".join(request_line.split(" ")[:2])
                self._count("requests")
                fault, delay_s = self._decide(method, request_line.split(" ")[1] if " " in request_line else "")
                expects = fields.get("expect", "").lower() == "100-continue"
                if fault in ("error_503", "error_500", "outage_503") and expects:
                    # Refused before the body is sent, as S3 does; the unread body means the
                    # connection cannot be reused.
                    status, code, message = SLOW_DOWN if fault != "error_500" else INTERNAL_ERROR
                    self._count(fault, what)
                    client.sendall(_error_response(status, code, message, close=True))
                    return
                if expects:
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = _read_body(reader, fields)
                if fault in ("error_503", "error_500", "outage_503"):
                    status, code, message = SLOW_DOWN if fault != "error_500" else INTERNAL_ERROR
                    self._count(fault, what)
                    client.sendall(_error_response(status, code, message, close=False))
                    continue
                if fault in ("reset_before", "outage_reset"):
                    self._count(fault, what)
                    _reset(client)
                    return
                # Forward, byte for byte, on this client's own upstream connection.
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=120)
                    up_reader = upstream.makefile("rb")
                upstream.sendall(head + body)
                self._count("forwarded")
                response, close = self._read_response(up_reader, method)
                armed = self._armed
                if armed is not None and armed in what:
                    with self._lock:
                        if self._armed == armed:
                            self._start_outage(True, what)
                    client.sendall(response)  # this one landed and is answered; the rest fail
                    if close:
                        return
                    continue
                if fault == "reset_after":
                    self._count(fault, what)
                    _reset(client)
                    return
                if fault == "delay":
                    self._count(fault, what)
                    if self._stopping.wait(delay_s):
                        return
                if self._outage:  # the outage began while moto answered: lost
                    self._count("outage_reset", what)
                    _reset(client)
                    return
                client.sendall(response)
                if close:
                    return
        except (ConnectionError, OSError, ValueError):
            return  # the client (or moto) went away: nothing to relay
        finally:
            for s in (up_reader, upstream, reader):
                try:
                    if s is not None:
                        s.close()
                except OSError:
                    pass
            try:
                client.close()
            except OSError:
                pass

    @staticmethod
    def _read_response(up_reader, method: str) -> tuple[bytes, bool]:
        """moto's answer as received (interim 1xx answers dropped: the proxy gave its own
        `100 Continue`), and whether the connection ends after it."""
        while True:
            head = _read_head(up_reader)
            status_line, fields = _headers(head)
            status = int(status_line.split(" ", 2)[1])
            if status >= 200 or status == 101:
                break
        close = fields.get("connection", "").lower() == "close" or status_line.startswith("HTTP/1.0")
        if method == "HEAD" or status in (204, 304):
            return head, close
        framed = "content-length" in fields or "chunked" in fields.get("transfer-encoding", "").lower()
        body = _read_body(up_reader, fields, until_close=not framed)
        return head + body, close or not framed
