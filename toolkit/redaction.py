"""One redaction of secrets in sources, used wherever a source is shown or stored.

A URL may carry credentials: userinfo (``https://user:password@host/...``) and
the query of a signed URL (``?X-Amz-Signature=...``, ``sig=``, ``token=``,
``access_token=``...). The reads keep the URL as given (its query goes with
every request); everything shown or stored — dataset attrs, NetCDF files,
cache entries, error messages, progress, logs — goes through :func:`redact`
(one URL) or :func:`redact_text` (any text: every URL in it).

A query parameter is secret when its name contains one of :data:`SECRET_WORDS`
(case-insensitive): ``X-Amz-Signature``, ``X-Amz-Credential``,
``X-Amz-Security-Token``, ``Signature``, ``sig``, ``token``, ``access_token``,
``api_key``, ``key``, ``Key-Pair-Id``, ``Policy``, ``password``, ``secret``...
Its value becomes :data:`MASK`; the names, and the parameters that are no
secret (``Expires``, ``X-Amz-Date``, ``versionId``), stay, so two signed URLs
of one file show (and are cached) alike.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "SECRET_WORDS", "is_secret_parameter", "redact", "redact_text"]

#: What a secret is replaced by.
MASK = "***"
#: Parts of a query parameter's name that make its value a secret.
SECRET_WORDS = ("sig", "token", "secret", "password", "passwd", "pwd", "credential", "key", "auth", "policy",
                "session", "code")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_SPLIT = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$", re.S)


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter called ``name`` holds a secret (see :data:`SECRET_WORDS`)."""
    low = name.lower()
    return any(word in low for word in SECRET_WORDS)


def _params(text: str) -> str:
    out = []
    for part in text.split("&"):
        name, eq, _ = part.partition("=")
        out.append(f"{name}={MASK}" if eq and is_secret_parameter(name) else part)
    return "&".join(out)


def redact(url: str) -> str:
    """``url`` with its userinfo and secret query (and fragment) parameters masked.

    ``https://u:p@host/m/model.safetensors?X-Amz-Signature=abc&Expires=9`` ->
    ``https://***@host/m/model.safetensors?X-Amz-Signature=***&Expires=9``.
    Text that is no URL is returned as it is; redacting twice changes nothing.

    Parameters
    ----------
    url : str

    Returns
    -------
    str
    """
    m = _SPLIT.match(url)
    if m is None:
        return url
    scheme, netloc, path, query, fragment = m.groups()
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    query = "?" + _params(query[1:]) if query else ""
    fragment = "#" + _params(fragment[1:]) if fragment else ""
    return f"{scheme}{netloc}{path}{query}{fragment}"


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact` (messages, logs)."""
    return _URL.sub(lambda m: redact(m[0]), text) if "://" in text else text
