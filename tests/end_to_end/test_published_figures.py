"""Every figure published in README.md, benchmarks/README.md and docs/scaling.md comes from a committed
benchmark results file (``benchmarks/results/*.json``) through ``benchmarks/publish.py``.

Two checks: each generated section equals what ``publish.py`` renders from the results files now
(so a rerun benchmark without a republish, or a hand edit inside a section, fails), and no measured
figure stands outside a generated section (a time, a speed ratio, a size, a share, a count of
agreeing matrices, a deviation), apart from the constants listed in ``NOT_MEASURED`` with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "benchmarks/README.md", "docs/scaling.md")


def _publish():
    spec = importlib.util.spec_from_file_location("publish", ROOT / "benchmarks" / "publish.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


publish = _publish()

#: what reads as a measured figure: a time, a speed ratio, a size or a rate, a percentage, "n/m" matrices,
#: a deviation in scientific notation
FIGURE = re.compile(
    r"(?<![\w.])(?:\d+(?:\.\d+)?\s?(?:s|ms|µs|min|h|KiB|MiB|GiB|KB|MB|GB|TB|MB/s|GB/s|core-s|core-hours)|\d+(?:\.\d+)?x"
    r"|\d+(?:\.\d+)?\s?%|\d+/\d+|\d(?:\.\d+)?e-?\d+)(?![\w/])")

#: figure-like text outside the generated sections that is no measurement: tolerances, targets, definitions
NOT_MEASURED = {
    "1e-6": "the agreement tolerance (relative), a definition", "1e-9": "the agreement tolerance (absolute)",
    "1e-3": "bench_weightwatcher's agreement tolerance", "99 %": "agreement target / prediction interval",
    "95 %": "agreement target of the randomized columns",
    "1 GiB": "the RSS limit's constant and the shard size (definitions)",
    "1e-5": "the power-law threshold of WeightWatcher (a constant)",
}


def outside_sections(text: str) -> str:
    return publish.SECTION.sub("", text)


@pytest.mark.parametrize("doc", DOCS)
def test_generated_sections_are_up_to_date(doc):
    text = (ROOT / doc).read_text()
    sections = publish.SECTION.findall(text)
    assert sections, f"{doc} has no generated section"
    rendered = publish.regenerate(text, publish.load_results())
    assert rendered == text, f"{doc} is out of date: run `.venv/bin/python benchmarks/publish.py`"


@pytest.mark.parametrize("doc", DOCS)
def test_no_figure_outside_the_generated_sections(doc):
    text = outside_sections((ROOT / doc).read_text())
    found = sorted({m.group(0) for m in FIGURE.finditer(text)} - set(NOT_MEASURED))
    assert not found, f"{doc}: figures written by hand (put them in a results file and a generated section): {found}"


def test_every_results_file_records_its_provenance():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert files
    for path in files:
        rec = json.loads(path.read_text())
        assert rec["benchmark"] == path.stem
        assert rec["command"].startswith(".venv/bin/python benchmarks/"), path.name
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d", rec["date"]), path.name
        assert "cores" in rec["machine"] and len(rec["load_average"]["start"]) == 3, path.name
        assert rec["figures"], path.name


def test_the_figure_pattern_finds_figures():
    """The check above is only as good as its pattern: it must see the kinds of figure the docs had."""
    written = ("4.4x faster at 0.31 of its peak, 210/210 agreeing (1e-13), 2615 s, 25 min, 78.6 s a layer, "
               "peak 2.13 GiB, 1.1 GB/s, 36 %")
    assert [m.group(0) for m in FIGURE.finditer(written)] == [
        "4.4x", "210/210", "1e-13", "2615 s", "25 min", "78.6 s", "2.13 GiB", "1.1 GB/s", "36 %"]
    assert not list(FIGURE.finditer("layer x component, 576 x 576, Q4_1, 2^16, gpt2, qwen2.5-7b, 16x16"))
