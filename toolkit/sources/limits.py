"""The bounds every read of a checkpoint keeps, read from the environment at each call.

=============================  ========  ==========================================================
variable                       default   what it bounds
=============================  ========  ==========================================================
``TOOLKIT_HTTP_TIMEOUT``       60        seconds to connect, to wait for a server's next bytes, and for
                                         an answer's whole status line and headers
``TOOLKIT_HTTP_MIN_RATE``      1024      bytes per second a response body must keep up, measured over
``TOOLKIT_HTTP_RATE_WINDOW``   30        seconds: each window of a body must bring ``MIN_RATE`` x
                                         ``RATE_WINDOW`` bytes (or end), else :class:`RemoteReadError`
``TOOLKIT_MAX_WHOLE_FILE``     67108864  bytes of a file read whole (``config.json``, an index, an adapter
                                         config, a hub listing), checked before anything is allocated
=============================  ========  ==========================================================

A value that is not a positive number is an :class:`~toolkit.errors.InvalidOptionError` naming the variable.
"""

from __future__ import annotations

import os

from toolkit.errors import InvalidOptionError

__all__ = ["http_timeout", "max_whole_file", "min_rate", "rate_window"]

_DEFAULTS = {"TOOLKIT_HTTP_TIMEOUT": 60.0, "TOOLKIT_HTTP_MIN_RATE": 1024.0, "TOOLKIT_HTTP_RATE_WINDOW": 30.0,
             "TOOLKIT_MAX_WHOLE_FILE": float(64 << 20)}


def _positive(name: str) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return _DEFAULTS[name]
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise InvalidOptionError(name, text, f"a positive number (default {_DEFAULTS[name]:g}); unset it for the "
                                 "default", "environment")
    return value


def http_timeout() -> float:
    """Seconds to connect, to wait for the next bytes, and for an answer's whole head (``TOOLKIT_HTTP_TIMEOUT``,
    default 60)."""
    return _positive("TOOLKIT_HTTP_TIMEOUT")


def min_rate() -> float:
    """Bytes per second a response body must keep up (``TOOLKIT_HTTP_MIN_RATE``, default 1024)."""
    return _positive("TOOLKIT_HTTP_MIN_RATE")


def rate_window() -> float:
    """Seconds over which :func:`min_rate` is measured (``TOOLKIT_HTTP_RATE_WINDOW``, default 30)."""
    return _positive("TOOLKIT_HTTP_RATE_WINDOW")


def max_whole_file() -> int:
    """Bytes of the largest file read whole (``TOOLKIT_MAX_WHOLE_FILE``, default 64 MiB)."""
    return int(_positive("TOOLKIT_MAX_WHOLE_FILE"))
