"""One embedding of data in an HTML page: JSON that no text of a Dataset can break out of.

Every page the toolkit writes embeds its data as ``<script type="application/json">`` elements
(:func:`toolkit.widgets.export_html`). Escaping ``</`` alone is not enough: ``<!--<script>`` in any text (an
attr, a model name, a label) puts the HTML tokenizer into its "script data double escaped" state, which
swallows the next ``</script>`` and leaves the page blank. :func:`json_for_html` therefore escapes every
``<``, ``>`` and ``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026`` (and U+2028 / U+2029, line terminators of
older JavaScript parsers): ``JSON.parse`` reads the same text back, and the element's content holds no markup
at all. :func:`text_for_html` makes any text safe to write as UTF-8 (a lone surrogate, which no UTF-8 encoder
writes, becomes U+FFFD) and escapes it for an element or attribute.
"""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np

__all__ = ["json_for_html", "text_for_html"]

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_TABLE = str.maketrans(_ESCAPES)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(x, digits: int):
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v, digits) for v in x]
    if isinstance(x, np.generic):
        return _clean(x.item(), digits)
    return x


def json_for_html(data, *, digits: int = 7) -> str:
    """``data`` as JSON safe as the content of a ``<script type="application/json">`` element.

    Parameters
    ----------
    data : dict, list, str, number, bool or None
        NumPy scalars are taken as the Python numbers they are.
    digits : int, default 7
        Significant digits of each float (what is drawn and hovered shows at most 6); NaN and infinities
        become ``null``.

    Returns
    -------
    str
        ASCII JSON without ``<``, ``>``, ``&``, U+2028 or U+2029 (each written as a ``\\uXXXX`` escape; a lone
        surrogate too), which ``JSON.parse`` reads back as ``data``.

    Examples
    --------
    >>> json_for_html({"t": "<!--<script>"})
    '{"t":"\\\\u003c!--\\\\u003cscript\\\\u003e"}'
    """
    text = json.dumps(_clean(data, digits), separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    return text.translate(_TABLE)


def text_for_html(text: str) -> str:
    """``text`` escaped for HTML (``&``, ``<``, ``>``, quotes) and writable as UTF-8 (a lone surrogate becomes
    U+FFFD)."""
    return html.escape(_SURROGATE.sub("\ufffd", text))
