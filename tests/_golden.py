"""Reading the committed golden tables of outside oracles (``tests/data/ww_*.csv``, written by
``benchmarks/ww_golden.py``): ``# key: JSON`` provenance lines, then a CSV with one row per matrix."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def read_golden(name: str) -> tuple[dict, list[dict]]:
    """``(header, rows)`` of ``tests/data/<name>``: the provenance lines as a dict, and the rows with
    numeric cells as float (empty cells NaN)."""
    header, lines = {}, []
    with open(DATA / name, newline="") as fh:
        for line in fh:
            if line.startswith("# "):
                key, _, value = line[2:].partition(": ")
                header[key] = json.loads(value)
            else:
                lines.append(line)
    return header, [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(lines)]


def _number(v: str):
    if v == "":
        return math.nan
    try:
        return float(v)
    except ValueError:
        return v
