"""Small requests with the retries of a read: a file's size by HEAD, a JSON answer (the hub's listing).

Both go through :func:`~toolkit.sources.remote.transport.exchange` (time, size
and redirects bounded there) and retry 429 and 5xx answers and dropped
connections as :meth:`~toolkit.sources.remote.http.RemoteFile.read_into` does
(:data:`~toolkit.sources.remote.http.RETRIES`, ``Retry-After``); a refused
connection is not retried (nothing listens there). A request that never got an
answer ends in a :class:`~toolkit.errors.RemoteTransientError` (the hub then
falls back to its local cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote

from toolkit.errors import RemoteAccessError, RemoteReadError, SourceNotFoundError
from toolkit.sources._common import json_object
from toolkit.sources.remote import http as _http
from toolkit.sources.remote.transport import Refused, Transient, exchange, read_whole

__all__ = ["HUB_REFUSALS", "get_json", "head", "hub_listing"]

#: What the hub's refusals mean, and what to do (a gated repo, no such repo, no such revision ``{revision!r}``).
HUB_REFUSALS = {
    "gated": "the repo is gated: accept its licence on huggingface.co and log in (`hf auth login`)",
    "repo": "no such local path, and no such repo on the hub (check the spelling, or log in if it is private)",
    "revision": "the repo has no revision {revision!r}",
}


def _retried(method: str, url: str, headers: dict, answer: Callable):
    """``answer(resp)`` of the first response it accepts: it returns ``(True, value)``, or ``(False, (seconds to
    wait or None, reason))`` for a 429/5xx to retry; it raises for the rest."""
    status, why, transient = 0, "", False
    for attempt in range(_http.RETRIES + 1):
        wait = None
        try:
            with exchange(method, url, headers) as (resp, _):
                _http._STATS.add(requests=1)
                status = resp.status_code
                done, value = answer(resp)
                if done:
                    return value
                wait, why = value
                transient = False
        except Refused:
            raise  # nothing listens there (or no such host): a retry would not change it
        except Transient as exc:
            why, transient = exc.reason, True
        if attempt < _http.RETRIES:
            _http._STATS.add(retries=1)
            time.sleep(wait if wait is not None else _http.BACKOFF * 2 ** attempt)
    error = Transient if transient else RemoteReadError  # no answer at all: the hub falls back to its cache
    raise error(url, status, f"{why}; gave up after {_http.RETRIES + 1} attempts. Try again later")


def _hub_headers(hub: bool) -> dict:
    headers = {"Accept-Encoding": "identity"}
    if hub:
        from huggingface_hub.utils import build_hf_headers

        headers.update(build_hf_headers())
    return headers


def head(url: str, *, hub: bool = False) -> tuple[int, str, int]:
    """``(size, etag, status)`` of a plain URL by a HEAD request, with the retries of a read.

    ``size`` is -1 and ``etag`` ``""`` when the server answers 404 (``status``
    says so); a redirect is followed.

    Raises
    ------
    RemoteAccessError, RemoteReadError
        As :meth:`RemoteFile.read_into` (a HEAD answered with neither 200 nor 404).
    """

    def answer(resp):
        status = resp.status_code
        if status == 404:
            return True, (-1, "", 404)
        if status in (401, 403):
            raise RemoteAccessError(url, status, _http.login_advice(hub))
        if status == 200:
            length = resp.headers.get("Content-Length", "")
            if not length.isdigit():
                raise RemoteReadError(url, 200, "the server gives no Content-Length, so the file's size is "
                                      "unknown; download it instead")
            return True, (int(length), _http._unquoted(resp.headers.get("ETag")), 200)
        if status not in _http._RETRIED:
            raise RemoteReadError(url, status, "unexpected answer to a HEAD request")
        return False, (_http.retry_after(resp, url), f"the server answered HTTP {status}")

    return _retried("HEAD", url, _hub_headers(hub), answer)


def get_json(url: str, what: str, *, hub: bool = False, refused: Callable | None = None) -> dict:
    """A JSON object served at ``url`` (read whole, at most ``TOOLKIT_MAX_WHOLE_FILE`` bytes).

    Parameters
    ----------
    url : str
    what : str
        What it is, for messages.
    hub : bool
        Send the hub token.
    refused : callable, optional
        ``refused(resp)`` raises the typed error of an answer other than 200, 429 or 5xx (default:
        :class:`~toolkit.errors.RemoteReadError`).

    Raises
    ------
    CheckpointFileError
        Not a JSON object, or over the cap.
    RemoteReadError
        As :func:`head`.
    """

    def answer(resp):
        status = resp.status_code
        if status == 200:
            return True, json_object(read_whole(resp, url, what), url, what)
        if status in _http._RETRIED:
            return False, (_http.retry_after(resp, url), f"the server answered HTTP {status}")
        if refused is not None:
            refused(resp)
        raise RemoteReadError(url, status, f"unexpected answer for the {what}")

    return _retried("GET", url, _hub_headers(hub), answer)


def hub_listing(endpoint: str, repo_id: str, revision: str) -> dict:
    """The hub's answer to ``HfApi.model_info(repo_id, revision, files_metadata=True)``, as a dict, read through
    the one transport (``GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=True``).

    Raises
    ------
    SourceNotFoundError
        No such repo or revision, or a gated repo (the message says which and what to do).
    RemoteReadError, CheckpointFileError
        As :func:`get_json`.
    """

    def refused(resp):
        code = resp.headers.get("X-Error-Code", "")
        if code == "GatedRepo":
            raise SourceNotFoundError(repo_id, HUB_REFUSALS["gated"])
        if code == "RevisionNotFound":
            raise SourceNotFoundError(repo_id, HUB_REFUSALS["revision"].format(revision=revision))
        if resp.status_code in (401, 403, 404):
            raise SourceNotFoundError(repo_id, HUB_REFUSALS["repo"])

    url = f"{endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}?blobs=True"
    return get_json(url, "hub listing", hub=True, refused=refused)
