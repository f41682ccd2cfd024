"""The one place every HTTP request of the toolkit goes through: bounded time, size and redirects, typed errors.

:func:`exchange` sends one request through the HTTP client ``huggingface_hub``
configures (:func:`huggingface_hub.get_session`: its proxies, certificates and
user agent) and follows redirects itself, so that each hop is checked:

- at most :data:`MAX_REDIRECTS` hops; a URL met twice is a redirect loop, a
  :class:`~toolkit.errors.RemoteReadError` naming the hops;
- a hop to a scheme other than ``http``/``https`` (``file://``, ``ftp://``) is a
  permanent :class:`~toolkit.errors.RemoteReadError`, never retried;
- the ``Authorization`` header (the hub token) goes only to the origin it was
  given for; a URL's userinfo only to its own host.

Time is bounded per request: connecting, each wait for bytes, and the whole
answer's status line and headers by :func:`~toolkit.sources.limits.http_timeout`
(the last on a helper thread, :func:`_answer_within`), and a body by
:func:`~toolkit.sources.limits.min_rate` over each
:func:`~toolkit.sources.limits.rate_window` (:func:`stream_body`), so a server
that drips bytes ends in a :class:`~toolkit.errors.RemoteReadError` after one
window. A body read whole (:func:`read_whole`) is checked against
:func:`~toolkit.sources.limits.max_whole_file` before anything is allocated,
whatever size the server states.

Transport failures a retry may cure (a dropped connection, a timeout) are a
:class:`~toolkit.errors.RemoteTransientError` (a :class:`~toolkit.errors.RemoteReadError`) the callers
retry; no connection at all is its subclass :class:`~toolkit.errors.RemoteRefusedError`, which the hub's
listing does not retry; everything else is a typed error at once. Every URL in a message is
redacted (:mod:`toolkit.redaction`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urljoin, urlsplit

from toolkit.errors import CheckpointFileError, RemoteReadError, ToolkitError
from toolkit.errors import RemoteRefusedError as Refused
from toolkit.errors import RemoteTransientError as Transient
from toolkit.redaction import redact, redact_exception
from toolkit.sources.limits import http_timeout, max_whole_file, min_rate, rate_window

__all__ = ["MAX_REDIRECTS", "Refused", "Transient", "client_failure", "exchange", "read_whole", "stream_body"]

#: Redirects followed for one request.
MAX_REDIRECTS = 10
_REDIRECTS = {301, 302, 303, 307, 308}


def http_library():
    """The HTTP library of ``huggingface_hub``'s client (``httpx2``, or ``httpx`` for older releases)."""
    try:
        import httpx2 as http
    except ImportError:  # pragma: no cover - huggingface_hub < 1.0
        import httpx as http
    return http


def _session():
    from huggingface_hub import get_session

    return get_session()


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or ""), parts.port


def _next_hop(url: str, resp, hops: list[str]) -> str:
    """Where a redirect answer sends the request, checked (scheme, loop)."""
    location = resp.headers.get("Location")
    if not location:
        raise RemoteReadError(url, resp.status_code, "a redirect without a Location; the server is misconfigured")
    target = urljoin(hops[-1], location.strip())
    scheme = urlsplit(target).scheme.lower()
    if scheme not in ("http", "https"):
        raise RemoteReadError(url, resp.status_code, f"a redirect to {redact(target)!r}, a {scheme or 'relative'}:// "
                              "address, which is never followed (only http and https); the server is misconfigured "
                              "or hostile: download the file another way and pass its local path")
    if target in hops or len(hops) > MAX_REDIRECTS:
        loop = " -> ".join(redact(h) for h in [*hops, target][-6:])
        what = "a redirect loop" if target in hops else f"more than {MAX_REDIRECTS} redirects"
        raise RemoteReadError(url, resp.status_code, f"{what} ({loop}); the server is misconfigured: check the URL, "
                              "or download the file another way")
    return target


def _hop_headers(headers: dict, first: str, target: str) -> dict:
    """The headers sent to ``target``: the ``Authorization`` of the first URL's origin kept for it only."""
    if _origin(target) == _origin(first):
        return headers
    return {k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")}


def client_failure(exc: BaseException, where: str) -> RemoteReadError | None:
    """The typed error of a failure of ``huggingface_hub``'s own requests (its downloads) that no retry cures:
    a redirect loop, a redirect to a scheme other than http(s); None for the rest."""
    http = http_library()
    if isinstance(exc, http.TooManyRedirects):
        return RemoteReadError(where, 0, f"a redirect loop, or too many redirects ({exc}); the server is "
                               "misconfigured: check the URL (and HF_ENDPOINT), or try again later")
    if isinstance(exc, (http.UnsupportedProtocol, http.InvalidURL)):
        return RemoteReadError(where, 0, f"a redirect to an address that is not http(s) ({exc}), which is never "
                               "followed; the server is misconfigured or hostile: check HF_ENDPOINT")
    return None


class _Helpers:
    """Daemon threads that send requests for :func:`_answer_within`, reused (starting a thread per request
    costs more than a loopback request): a job goes to an idle helper, or to a new one when none is idle (a
    helper stuck on a hostile server never delays another request)."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0

    def run(self, job) -> None:
        with self.lock:
            spawn = self.idle == 0
            if not spawn:
                self.idle -= 1  # that helper takes this job
        if spawn:
            threading.Thread(target=self._work, args=(job,), daemon=True, name="toolkit-http-answer").start()
        else:
            self.jobs.put(job)

    def _work(self, job) -> None:
        while True:
            job()
            with self.lock:
                self.idle += 1
            job = self.jobs.get()


_HELPERS = _Helpers()


class _Pending:
    """One request sent on a helper thread: its response or failure, or abandoned by the caller."""

    def __init__(self):
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.resp = self.exc = None
        self.abandoned = False


def _answer_within(session, request, limit: float, url: str):
    """``session.send(request, stream=True)`` (status and headers; the body not read), or a
    :class:`~toolkit.errors.RemoteReadError` after ``limit`` seconds in all.

    The client's timeouts bound each wait for bytes, not the whole answer: a
    server that sends its status line and headers a byte at a time would hold a
    read for ever. The request runs on a helper thread (:class:`_Helpers`), left to
    end on its own (its response closed) when the caller gives up; it writes into
    nothing of the caller's.
    """
    pending = _Pending()

    def send():
        resp = exc = None
        try:
            resp = session.send(request, stream=True, follow_redirects=False)
        except BaseException as failure:  # noqa: BLE001 - handed to the caller, who maps it
            exc = failure
        with pending.lock:  # the answer is handed over, or closed if the caller gave up: never both
            if pending.abandoned:
                if resp is not None:
                    resp.close()
                return
            pending.resp, pending.exc = resp, exc
            pending.done.set()

    _HELPERS.run(send)
    if not pending.done.wait(limit):
        with pending.lock:
            if not pending.done.is_set():
                pending.abandoned = True
                raise RemoteReadError(url, 0, f"no complete answer (status line and headers) within {limit:g} s "
                                      "(TOOLKIT_HTTP_TIMEOUT); the server is too slow or hostile: try again later, "
                                      "or raise TOOLKIT_HTTP_TIMEOUT for a slow link")
    if pending.exc is not None:
        raise pending.exc
    return pending.resp


@contextmanager
def exchange(method: str, url: str, headers: dict) -> Iterator[tuple[object, list]]:
    """Send one request, following redirects hop by hop: ``(response, [earlier hops' responses])``.

    The response's body is not read yet (stream it with :func:`stream_body` or
    :func:`read_whole`); it is closed on leaving the block.

    Raises
    ------
    Transient
        No answer, a dropped connection, a timeout (the caller may retry).
    RemoteReadError
        A redirect loop, too many redirects, a redirect to another scheme, a URL the client refuses.
    """
    http = http_library()
    timeout = http_timeout()
    hops, history = [url], []
    sent = headers
    try:
        session = _session()
        while True:
            request = session.build_request(method, hops[-1], headers=sent, timeout=http.Timeout(timeout))
            resp = _answer_within(session, request, timeout, url)
            if resp.status_code not in _REDIRECTS or "Location" not in resp.headers:
                break
            resp.close()
            history.append(resp)
            hops.append(_next_hop(url, resp, hops))
            sent = _hop_headers(headers, url, hops[-1])
            if resp.status_code == 303:
                method = "GET" if method != "HEAD" else method
    except (http.UnsupportedProtocol, http.InvalidURL) as exc:
        raise RemoteReadError(url, 0, f"the client refuses the address {redact(hops[-1])!r} "
                              f"({redact_exception(exc)}); only http:// and https:// URLs are read") from None
    except http.TransportError as exc:  # no connection at all: Refused (the exception is not chained: redacted)
        error = Refused if isinstance(exc, http.ConnectError) else Transient
        raise error(url, 0, f"no answer ({redact_exception(exc)})") from None
    except ToolkitError:
        raise
    except Exception as exc:  # any other failure of the client or its hooks (OfflineModeIsEnabled): never raw
        raise RemoteReadError(url, 0, _failed("the request failed", exc)) from None
    try:
        yield resp, history
    except http.TransportError as exc:
        raise Transient(url, resp.status_code, f"the connection dropped mid-body ({redact_exception(exc)})") \
            from None
    except http.HTTPError as exc:
        raise RemoteReadError(url, resp.status_code, f"the body failed ({redact_exception(exc)})") from None
    finally:
        resp.close()


def _failed(what: str, exc: BaseException) -> str:
    """The reason of a typed error for a dependency's exception: its type and redacted message, and the way
    out where the type says what it is (the hub client's offline mode)."""
    reason = f"{what} ({redact_exception(exc)})"
    if type(exc).__name__ == "OfflineModeIsEnabled":
        reason += ("; HF_HUB_OFFLINE=1 forbids every request: unset it to read a remote checkpoint, or pass "
                   "a local copy")
    return reason


def _chunks(resp, url: str) -> Iterator[bytes]:
    """The body of ``resp`` chunk by chunk, keeping the minimum rate (see :func:`stream_body`)."""
    rate, window = min_rate(), rate_window()
    n = mark = 0
    since = time.monotonic()
    for chunk in resp.iter_raw():
        n += len(chunk)
        yield chunk
        now = time.monotonic()
        if now - since >= window:
            if n - mark < rate * (now - since):
                raise RemoteReadError(
                    url, resp.status_code, f"the server sent {n - mark} bytes in {now - since:.1f} s, slower than the "
                    f"minimum of {rate:g} bytes/s (TOOLKIT_HTTP_MIN_RATE, measured over TOOLKIT_HTTP_RATE_WINDOW="
                    f"{window:g} s); {n} bytes had arrived. Try again later, lower TOOLKIT_HTTP_MIN_RATE for a slow "
                    "link, or download the checkpoint",
                )
            mark, since = n, now


def stream_body(resp, url: str, out: memoryview) -> Iterator[int]:
    """Copy ``resp``'s body into ``out`` (at most ``len(out)`` bytes), keeping the minimum rate, yielding the
    bytes copied so far after each chunk (the last value stays known when the connection drops).

    Fewer bytes when the body ends early (the caller resumes). Inside
    :func:`exchange`'s block, so a dropped connection is a :class:`Transient`.

    Raises
    ------
    RemoteReadError
        The body came slower than :func:`~toolkit.sources.limits.min_rate` over a
        :func:`~toolkit.sources.limits.rate_window` (not retried: a server that slow is
        not waited for; the message names the variables to change).
    """
    take, n = len(out), 0
    if not take:
        return
    for chunk in _chunks(resp, url):
        k = min(len(chunk), take - n)
        out[n:n + k] = chunk[:k]
        n += k
        yield n
        if n >= take:
            return


def whole_size(url: str, stated: int, what: str) -> int:
    """``stated`` (a size a server or listing gives for a file read whole), checked against the cap.

    Raises
    ------
    CheckpointFileError
        More than :func:`~toolkit.sources.limits.max_whole_file` bytes.
    """
    cap = max_whole_file()
    if stated > cap:
        raise CheckpointFileError(url, f"the {what} is {stated} bytes as the server states it, more than the "
                                  f"{cap} bytes a file read whole may have (TOOLKIT_MAX_WHOLE_FILE); nothing was "
                                  "allocated for it. A real file that large: raise TOOLKIT_MAX_WHOLE_FILE")
    return stated


def read_whole(resp, url: str, what: str) -> bytes:
    """The whole body of ``resp`` (a JSON answer), at most the cap, whatever its ``Content-Length`` says.

    Raises
    ------
    CheckpointFileError
        A stated or actual body over :func:`~toolkit.sources.limits.max_whole_file`.
    RemoteReadError
        As :func:`stream_body`.
    """
    length = resp.headers.get("Content-Length", "")
    if length.isdigit():
        whole_size(url, int(length), what)
    body = bytearray()
    for chunk in _chunks(resp, url):
        body += chunk
        whole_size(url, len(body), what)
    return bytes(body)
