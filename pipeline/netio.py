"""HTTP exchanges with a wall-clock deadline covering connect, status line, headers and body, for the feed
fetcher and the webhook alike."""

from __future__ import annotations

import email.message
import functools
import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

_READ_CHUNK = 64 * 1024


class BodyError(Exception):
    """A response body that is too large or shorter than its Content-Length (the message names no URL)."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: email.message.Message
    body: bytes


class Deadline:
    """A watchdog for one exchange: when `seconds` have passed, every socket it watches is shut down, so a
    read blocked on a server that drips bytes returns at once instead of waiting out each read's timeout.

    Use as a context manager; `expired` tells afterwards whether the watchdog fired."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        """Seconds left; raises TimeoutError once none are."""
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"deadline of {self.seconds:g} s passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def create_connection(self, address: tuple[str, int], timeout: object = None,
                          source_address: tuple[str, int] | None = None) -> socket.socket:
        """socket.create_connection with the time left as its timeout, the socket watched."""
        sock = socket.create_connection(address, self.remaining(), source_address)
        self.watch(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed (or, for a socket TLS took over, detached)
        pass


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: object, deadline: Deadline, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = deadline.create_connection


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: object, deadline: Deadline, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline
        self._create_connection = deadline.create_connection

    def connect(self) -> None:
        # As HTTPSConnection.connect, but the TLS socket is watched before its handshake starts.
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._tunnel_host or self.host,
                                              do_handshake_on_connect=False)
        self._deadline.watch(self.sock)
        self.sock.do_handshake()


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPConnection, deadline=self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTPSConnection, deadline=self._deadline), req)


def _opener(deadline: Deadline, *, follow_redirects: bool) -> urllib.request.OpenerDirector:
    # Built by hand rather than with build_opener(): no file:, ftp: or data: handlers, so a redirect
    # cannot lead off HTTP(S); without the redirect handler a 3xx is an HTTPError like any non-2xx.
    opener = urllib.request.OpenerDirector()
    handlers = [urllib.request.ProxyHandler(), urllib.request.UnknownHandler(), _HTTPHandler(deadline),
                _HTTPSHandler(deadline), urllib.request.HTTPDefaultErrorHandler(),
                urllib.request.HTTPErrorProcessor()]
    if follow_redirects:
        handlers.append(urllib.request.HTTPRedirectHandler())
    for handler in handlers:
        opener.add_handler(handler)
    return opener


def exchange(request: urllib.request.Request, *, timeout: float, max_bytes: int,
             follow_redirects: bool) -> HttpResponse:
    """Send `request` and read its whole response within `timeout` seconds of wall-clock time.

    Raises TimeoutError when the deadline passes (at any stage), BodyError for a body over `max_bytes` or
    shorter than its Content-Length, urllib.error.HTTPError for a status outside 2xx (a 3xx too unless
    `follow_redirects`), and URLError, OSError or http.client.HTTPException for other failures."""
    with Deadline(timeout) as deadline:
        try:
            with _opener(deadline, follow_redirects=follow_redirects).open(request, timeout=timeout) as response:
                result = HttpResponse(response.status, response.headers, _read_body(response, max_bytes))
        except urllib.error.HTTPError:
            raise
        except (OSError, http.client.HTTPException, BodyError) as error:
            # A watchdog shutdown surfaces as a reset, an EOF or a short read: report it as what it is.
            if deadline.expired or _is_timeout(error):
                raise TimeoutError(f"timed out after {timeout:g} s") from None
            raise
    if deadline.expired:  # the shutdown ended a body without a Content-Length early
        raise TimeoutError(f"timed out after {timeout:g} s")
    return result


def _is_timeout(error: BaseException) -> bool:
    return isinstance(error, TimeoutError) or isinstance(getattr(error, "reason", None), TimeoutError)


def _read_body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    declared = response.headers.get("Content-Length", "").strip()
    expected = int(declared) if declared.isdigit() and not response.chunked else None
    if expected is not None and expected > max_bytes:
        raise BodyError(f"body of {expected} bytes exceeds the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    # One byte past the limit is enough to know the body is too big.
    while size <= max_bytes:
        chunk = response.read1(min(_READ_CHUNK, max_bytes + 1 - size))
        if not chunk:
            if expected is not None and size < expected:
                raise BodyError(f"body truncated: {size} of {expected} bytes (Content-Length) arrived")
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise BodyError(f"body exceeds the limit of {max_bytes} bytes")


def within(seconds: float, what: str, work: Callable[[], object]) -> object:
    """`work()` on a worker thread, given `seconds` of wall-clock time (TimeoutError naming `what` after that).

    For client libraries (openai's httpx, MLflow's requests) whose timeouts are per socket read and which retry
    on their own, so only this bounds the whole exchange. A call past its deadline is left to finish on its
    daemon thread (the library's own timeout ends it); the caller must not rely on what it still does."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 (re-raised on the caller's thread)
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name=f"deadline {what}")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"{what} gave no answer within the deadline of {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")
