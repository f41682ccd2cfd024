"""One number rule, two implementations: Python's ``format_value`` and the page's ``formatNumber`` agree,
and a panel's labels carry the digits that tell its values apart (issue 36, item 1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests._node import needs_node, run_js
from toolkit.plot.numbers import (
    digits_for,
    distinct_digits,
    format_column,
    format_ticks,
    format_value,
    near_constant_note,
)

VALUES = [0.0, -0.0, 1.0, -1.0, 0.0912, 35.5, 9710.0, 9996.0, 9999.5, 19000.0, 8.54e-4, 0.001, 0.00099999,
          0.125, 0.0125, -0.0125, 2.5, 0.35, 1.005, 0.020012345, 0.0200022, 27.094123, 27.0985, 0.99951,
          84700.0, 21.8, 4.3, 1e-12, -3.3e-7, 1.23456789e20, 123456.0, 0.1 + 0.2, 1 / 3, 2 / 3, 7.0e-3,
          float("nan"), float("inf"), float("-inf")]
DIGITS = [1, 3, 4, 5, 6, 9]


@needs_node
def test_python_and_page_format_every_value_alike():
    table = [[x, d] for x in VALUES for d in DIGITS]
    got = run_js(f"const t = {json.dumps(table).replace('NaN', 'NaN').replace('Infinity', 'Infinity')};\n"
                 "console.log(JSON.stringify(t.map(([x, d]) => formatNumber(x, d))));")
    want = [format_value(x, d) for x, d in table]
    assert [(x, d, g) for (x, d), g, w in zip(table, got, want, strict=True) if g != w] == []
    assert want[VALUES.index(9996.0) * len(DIGITS) + 1] == "1.00e+04"


@needs_node
def test_python_and_page_keep_trailing_zeros_alike():
    table = [[x, d] for x in VALUES for d in DIGITS]
    got = run_js(f"const t = {json.dumps(table)};\n"
                 "console.log(JSON.stringify(t.map(([x, d]) => formatNumber(x, d, false))));")
    want = [format_value(x, d, trim=False) for x, d in table]
    assert [(x, d, g) for (x, d), g, w in zip(table, got, want, strict=True) if g != w] == []
    assert format_value(192.0, 4, trim=False) == "192.0" and format_value(1.0, 4, trim=False) == "1.000"


def test_a_column_and_a_colour_bar_use_one_notation():
    assert format_column([192.31, 192.0, 191.2], 4) == ["192.3", "192.0", "191.2"]
    assert format_column([0.0053, 0.00105, 0.0, 4e-4], 3) == ["5.30e-03", "1.05e-03", "0", "4.00e-04"]
    assert format_column([0.0053, 0.00105, 0.0], 3) == ["0.00530", "0.00105", "0"]
    assert format_column([48.0, 120.0, 7.0], 3) == ["48", "120", "7"]  # counts stay whole
    # a 0 tick prints "0" in either notation: it does not force scientific on 0.001 .. 0.003
    assert format_ticks([0.0, 0.001, 0.002, 0.003], "sequential", 3) == ["0", "0.001", "0.002", "0.003"]


def test_format_value_keeps_its_three_digit_look():
    assert [format_value(x) for x in (0.0912, 35.5, 9996.0, 8.54e-4, 0.0, 19000.0)] == \
        ["0.0912", "35.5", "1.00e+04", "8.54e-04", "0", "1.90e+04"]
    assert format_value(0.125, 2) == "0.13"  # ties away from zero, as the page's toPrecision
    assert format_value(float("nan")) == ""


@pytest.mark.parametrize(("values", "digits", "labels"), [
    # RMS of a random 7B-shaped checkpoint: every cell 0.0200, 0.1 % apart (ticks were "0.02 0.02 0.02")
    (0.02 + np.linspace(0, 2e-5, 5), 6, ["0.02", "0.020005", "0.02001", "0.020015", "0.02002"]),
    # Frobenius norm 27.094 .. 27.098 (ticks were "27.1 27.1 27.1")
    (np.linspace(27.094, 27.098, 3), 6, ["27.094", "27.096", "27.098"]),
    # cosine similarity 0.9995 .. 1 (ticks were "1 1 1")
    (np.linspace(0.9995, 1.0, 3), 6, ["0.9995", "0.99975", "1"]),
    # an ordinary panel keeps three digits
    (np.linspace(0.075, 0.105, 4), 3, ["0.075", "0.085", "0.095", "0.105"]),
])
def test_labels_tell_near_equal_values_apart(values, digits, labels):
    assert digits_for(values) == digits
    got = format_ticks(values, "sequential", digits)
    assert got == labels
    assert len(set(got)) == len(got)


def test_digits_for_counts_the_colour_limits_span():
    assert digits_for([5.0, 5.0]) == 3  # constant: nothing to tell apart
    assert digits_for([1.0, 100.0], 1.0, 1.002) == 7  # ticks between limits 0.2 % apart
    assert digits_for([]) == 3


def test_near_constant_panel_says_so():
    v = 0.02 * (1 + np.linspace(-5e-4, 5e-4, 12))
    assert near_constant_note(v) == "all within 0.05 % of 0.02"
    assert near_constant_note(np.linspace(5.2, 7.2, 10)) == ""  # 30 % spread: real contrast
    assert near_constant_note([3.0, 3.0, np.nan]) == ""  # constant: the "constant: 3" caption says it
    assert near_constant_note([-1e-9, 1e-9]) == ""  # median 0: no relative spread


def test_distinct_digits_tells_a_short_list_apart():
    values = [0.02000994, 0.020009902, 0.020009898, 0.02000964]
    d = distinct_digits(values)
    assert len({format_value(x, d) for x in values}) == 4 and d == 8
    assert distinct_digits([1.0, 2.0]) == 3 and distinct_digits([5.0, 5.0]) == 3
