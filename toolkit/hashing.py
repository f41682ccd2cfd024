"""Stable digests of values: equal values give equal hex digests, in any process.

The cache keys (:mod:`toolkit.collect.cache`) and the identity of a base
model with an adapter merged in (:class:`toolkit.sources.lora.MergedSource`)
are made with :func:`digest`. A leaf: it imports nothing of the toolkit.
"""

from __future__ import annotations

import hashlib
import json


def stable_value(obj):
    """A JSON-able stand-in for ``obj`` whose text changes whenever its value does.

    Parameters
    ----------
    obj : object
        str, numbers, bools and None as they are; lists, tuples and dicts
        element by element (dict keys as str); NumPy arrays and torch tensors
        as ``["array", dtype, shape, sha256 of the bytes]`` (bfloat16 and
        float16 widened exactly to float32; ``str`` would elide long arrays);
        anything else by its ``repr``.

    Returns
    -------
    object
        Made of str, numbers, bools, None and lists/dicts of them.
    """
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)):
        return [stable_value(o) for o in obj]
    if isinstance(obj, dict):
        return {str(k): stable_value(v) for k, v in obj.items()}
    try:
        import numpy as np

        if hasattr(obj, "detach"):  # a torch tensor (bf16 widened exactly to float32)
            dtype, obj = str(obj.dtype), obj.detach().cpu()
            obj = obj.float() if obj.is_floating_point() and obj.dtype.itemsize < 4 else obj
            arr = np.ascontiguousarray(obj.numpy())
        else:
            arr = np.ascontiguousarray(obj)
            dtype = str(arr.dtype)
        if arr.dtype != object:
            return ["array", dtype, list(arr.shape), hashlib.sha256(arr.tobytes()).hexdigest()]
    except Exception:  # noqa: BLE001 - not array-like: its repr below
        pass
    return repr(obj)


def digest(*parts: object) -> str:
    """A 32-hex-digit sha256 of ``parts``.

    Parameters
    ----------
    *parts : object
        Anything :func:`stable_value` takes; written as JSON with sorted keys
        (arrays by their bytes, other objects by ``repr``).

    Returns
    -------
    str
        32 hexadecimal digits, equal for equal values in any process.

    Examples
    --------
    >>> digest("a", 1) == digest("a", 1) != digest("a", 2)
    True
    """
    return hashlib.sha256(json.dumps(stable_value(parts), sort_keys=True).encode()).hexdigest()[:32]
