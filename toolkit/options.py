"""Checks of the options of the public functions, at the front door.

Each checker takes the value as the caller passed it, the option's name and
the function it belongs to (for the message), and returns the value the
function will use and record (an ``int`` for a whole number, a ``float`` for
a real one), or raises :class:`~toolkit.errors.InvalidOptionError` naming the
option, the value and what it takes. Nothing is silently clipped or rounded:
``k=0`` is an error, not ``k=1``; ``k=2.5`` is an error, not ``k=2``.

The command lines use the same checks as argparse types (:func:`arg_type`),
so ``--k 0`` fails before any work with the same words.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from toolkit.errors import InvalidOptionError, TextFileNotFoundError, TextInputError

#: Seeds are the 64-bit unsigned integers torch's generators take (a negative one would be used modulo 2**64).
SEED_MAX = 2**64 - 1


def _is_whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not _is_bool(value)  # NumPy integers are Integral


def _is_bool(value) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy.bool_ without importing numpy


def _bound_text(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum} to {maximum}"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return ""


def whole_number(value, option: str, where: str, *, minimum: int | None = None, maximum: int | None = None,
                 meaning: str = "") -> int:
    """``value`` as an ``int`` when it is a whole number in ``[minimum, maximum]``.

    Booleans, floats (even ``2.0``), strings and NaN are refused: an option
    that counts something takes an ``int`` (a NumPy integer too).

    Raises
    ------
    InvalidOptionError
    """
    bounds = _bound_text(minimum, maximum)
    expected = "a whole number" + (f" {bounds}" if bounds else "") + (f" ({meaning})" if meaning else "")
    if not _is_whole(value):
        hint = ""
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            hint = f"; pass {int(value)} (an int)"
        elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            hint = f"; pass {int(value)} (an int, not a str)"
        raise InvalidOptionError(option, value, expected + hint, where)
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidOptionError(option, value, expected, where)
    return value


def real_number(value, option: str, where: str, *, minimum: float | None = None, above: float | None = None,
                maximum: float | None = None, meaning: str = "") -> float:
    """``value`` as a ``float`` when it is a finite real number, ``>= minimum``
    (or ``> above``) and ``<= maximum``.

    NaN and infinities are refused, as are booleans and strings.

    Raises
    ------
    InvalidOptionError
    """
    parts = []
    if minimum is not None:
        parts.append(f">= {minimum:g}")
    if above is not None:
        parts.append(f"> {above:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    expected = "a finite number" + (" " + " and ".join(parts) if parts else "") + (f" ({meaning})" if meaning else "")
    if not isinstance(value, numbers.Real) or _is_bool(value):
        hint = ""
        if isinstance(value, str):
            try:
                hint = f"; pass {float(value)!r} (a float, not a str)"
            except ValueError:
                pass
        raise InvalidOptionError(option, value, expected + hint, where)
    number = float(value)
    if not math.isfinite(number) or (minimum is not None and number < minimum) \
            or (above is not None and number <= above) or (maximum is not None and number > maximum):
        raise InvalidOptionError(option, value, expected, where)
    return number


def flag(value, option: str, where: str) -> bool:
    """``value`` when it is ``True`` or ``False`` (a NumPy bool too); else an error.

    ``"no"`` or ``0`` would pass an ``if``; refusing them keeps a typo from
    meaning its opposite.
    """
    if not _is_bool(value):
        raise InvalidOptionError(option, value, "True or False", where)
    return bool(value)


def progress_option(value, where: str):
    """``progress``: a bool (None: False), or a callable ``progress(done, total, name)``."""
    if callable(value):
        return value
    if value is None:
        return False
    if not _is_bool(value):
        raise InvalidOptionError("progress", value, "True (a progress bar), False (none) or a callable "
                                 "progress(done, total, name)", where)
    return bool(value)


def choice(value, option: str, where: str, choices: Iterable[str]) -> str:
    """``value`` when it is one of ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise InvalidOptionError(option, value, "one of " + ", ".join(map(repr, choices)), where)
    return value


def metric_names(value, where: str, kind: str):
    """``metrics``: None (every metric of ``kind``), one name, or a non-empty
    list of names; unknown names are left to the registry (which suggests close ones)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, dict, set, frozenset)) or not isinstance(value, Iterable):
        raise InvalidOptionError("metrics", value, f"None (every {kind} metric), a name or a list of names, "
                                 f"e.g. toolkit.list_metrics({kind!r})[:2]", where)
    names = list(value)
    if not names:
        raise InvalidOptionError("metrics", value, f"None (every {kind} metric) or a non-empty list of names: "
                                 "an empty list selects nothing to compute", where)
    return names


def mapping_option(value, where: str):
    """``mapping``: None, a :class:`toolkit.Mapping` or a dict ``{component: regex}``."""
    from collections.abc import Mapping as AbcMapping

    from toolkit.architectures.mapping import Mapping

    if value is None or isinstance(value, (Mapping, AbcMapping)):
        return value
    raise InvalidOptionError("mapping", value, "None, a toolkit.Mapping({...}) or a dict {component: regex}", where)


def seed(value, where: str, option: str = "seed") -> int:
    """A random seed: a whole number from 0 to 2**64 - 1 (what torch uses as given)."""
    return whole_number(value, option, where, minimum=0, maximum=SEED_MAX)


def read_text_file(path: str | os.PathLike, what: str, other_way: str = "") -> str:
    """The UTF-8 text of the file ``path`` (``what`` names it in messages: ``"prompts file"``;
    ``other_way`` ends the message for a file that is not UTF-8, e.g. ``"or pass the texts as a list of str"``).

    Raises
    ------
    TextFileNotFoundError
        No such file, or a folder.
    TextInputError
        The file cannot be read, or is not UTF-8 (the message gives the offset
        of the first bad byte and how to convert the file).
    """
    p = Path(os.path.expanduser(os.fspath(path)))
    if p.is_dir():
        raise TextFileNotFoundError(str(p), f"it is a folder, not a {what}; pass the file itself")
    if not p.is_file():
        raise TextFileNotFoundError(str(p), f"no such {what}; check the path")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TextInputError(f"{what} {str(p)!r}", f"cannot be read ({e.strerror or e}); check its permissions") \
            from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = data[e.start:e.start + 4]
        raise TextInputError(
            f"{what} {str(p)!r}",
            f"is not UTF-8 text (bytes {bad.hex(' ')} at offset {e.start} are not UTF-8): convert it to UTF-8, "
            f"e.g. `iconv -f latin1 -t utf-8 {p.name} > {p.stem}.utf8{p.suffix}`" + (f", {other_way}" if other_way
                                                                                    else ""),
        ) from e


def arg_type(check: Callable, label: str, convert: Callable = int):
    """An argparse ``type`` that converts the text with ``convert`` then runs
    ``check(value, option, where)``; a bad value is an argparse error (one line, exit 2)."""
    def parse(text: str):
        kind = "a whole number" if convert is int else "a number"
        if "_" in text:  # Python's int('1_6') is 16: a typo on the command line, not a number
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind} (digits only, no '_')")
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        try:
            return check(value, label, "")
        except InvalidOptionError as e:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid: {e.expected}") from None

    parse.__name__ = label  # argparse names the type in some messages
    return parse


def collect_options(where: str, *, metrics, kind: str, mapping, progress, cache) -> tuple:
    """The options :func:`toolkit.weight_stats`, :func:`toolkit.compare` and
    :func:`toolkit.compare_series` share: ``(metrics, mapping, progress, cache)``, checked."""
    return (metric_names(metrics, where, kind), mapping_option(mapping, where), progress_option(progress, where),
            flag(cache, "cache", where))


def diff_options(where: str, tolerance, k) -> tuple[float, int]:
    """``(tolerance, k)`` of the diff functions, checked: the values used and recorded."""
    return (real_number(tolerance, "tolerance", where, minimum=0.0,
                        meaning="entries with |t - b| <= tolerance count as unchanged; 0 compares stored bits"),
            whole_number(k, "k", where, minimum=1,
                         meaning="the subspace dimension of subspace_overlap, clipped to min(out, in) per matrix"))


def training_steps(steps, where: str) -> list[int] | None:
    """``steps`` of :func:`toolkit.compare_series`: None, or increasing whole numbers >= 0."""
    if steps is None:
        return None
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
        raise InvalidOptionError("steps", steps, "None or a list of whole numbers, one training step per "
                                 "checkpoint", where)
    steps = list(steps)
    out = [whole_number(s, f"steps[{i}]", where, minimum=0, meaning="a training step")
           for i, s in enumerate(steps)]
    if len(set(out)) != len(out):
        dup = next(s for s in out if out.count(s) > 1)
        raise InvalidOptionError("steps", steps, f"distinct training steps, one per checkpoint ({dup} is given "
                                 "twice)", where)
    back = next((i for i in range(1, len(out)) if out[i] < out[i - 1]), None)
    if back is not None:
        raise InvalidOptionError("steps", steps, f"increasing training steps, one per checkpoint in training order "
                                 f"(step {out[back]} comes after {out[back - 1]}): sort the checkpoints and steps "
                                 "together", where)
    return out
