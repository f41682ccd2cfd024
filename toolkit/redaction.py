"""One redaction of secrets in sources, used wherever a source is shown or stored.

A URL may carry credentials: userinfo (``https://user:password@host/...``) and
the query of a signed URL (``?X-Amz-Signature=...``, ``sig=``, ``hdnts=``,
``md5=``, ``jwt=``...). The reads keep the URL as given (its query goes with
every request); everything shown or stored — dataset attrs, NetCDF files,
cache entries, error messages, progress, logs — goes through :func:`redact`
(one URL) or :func:`redact_text` (any text: every URL in it).

The rule masks by default, since a list of secret words always misses the
next signing scheme:

- userinfo becomes :data:`MASK` (``https://***@host/...``);
- every query (and fragment) parameter's value becomes :data:`MASK`, except
  the parameters whose name is in :data:`HARMLESS` (``Expires``,
  ``X-Amz-Date``, ``versionId``...: no secret, and what tells two versions or
  two signatures of one file apart). Names are compared after
  percent-decoding (``+`` as a space) and case-folding, so ``%73ig`` is
  ``sig`` and ``EXPIRES`` is ``Expires``; the names themselves stay as given,
  so two signed URLs of one file show (and are cached) alike;
- a parameter without ``=`` (``?S3CR3T``) is all value: masked, unless its
  name is harmless.

The scheme is matched case-insensitively (RFC 3986: ``HTTP://`` is ``http://``).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

__all__ = ["HARMLESS", "MASK", "is_secret_parameter", "redact", "redact_exception", "redact_text"]

#: What a secret is replaced by.
MASK = "***"
#: Query parameter names (case-folded, percent-decoded) whose values are shown: known to carry no secret.
HARMLESS = frozenset({
    "expires", "x-amz-date", "x-amz-expires", "x-amz-algorithm", "x-amz-signedheaders", "versionid",
    "response-content-type", "response-content-disposition", "download", "revision", "v",
    "x-goog-algorithm", "x-goog-date", "x-goog-expires", "x-goog-signedheaders",
    "se", "st", "sp", "sv", "sr", "spr", "srt", "ss",  # Azure SAS fields other than its signature ``sig``
})
#: a URL in running text: it ends at whitespace, ``<``, ``>``, a backtick, or a quote followed by what ends a
#: quotation (whitespace, punctuation, the end): a quote inside a query value does not end it
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s'\"<>`]|['\"](?=[^\s'\"<>`,.:;!?)\]}]))+")
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]*@")
_SPLIT = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$", re.S)


def is_secret_parameter(name: str) -> bool:
    """Whether the value of a query parameter called ``name`` is masked: every name not in :data:`HARMLESS`
    (compared after percent-decoding and case-folding)."""
    try:
        plain = unquote_plus(name, errors="strict")
    except UnicodeDecodeError:
        return True
    return plain.strip().casefold() not in HARMLESS


def _params(text: str) -> str:
    out = []
    for part in text.split("&"):
        name, eq, _ = part.partition("=")
        if not part or not is_secret_parameter(name):
            out.append(part)
        else:
            out.append(f"{name}={MASK}" if eq else MASK)
    return "&".join(out)


def redact(url: str) -> str:
    """``url`` with its userinfo and every query (and fragment) value but the harmless ones masked.

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
    """``text`` with every URL in it passed through :func:`redact` (messages, logs); a userinfo is masked up
    to its last ``@`` even where it holds a quote or an ``@`` (which end a URL in running text)."""
    if "://" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m[1]}{MASK}@", text)
    return _URL.sub(lambda m: redact(m[0]), text)


def redact_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` of a dependency's exception, every URL in it redacted (for a typed error's
    message; never chain the raw exception, whose message and arguments hold the URL as it was)."""
    text = str(exc).strip()
    return type(exc).__name__ + (f": {redact_text(text)}" if text else "")
