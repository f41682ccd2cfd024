"""One JSON embedding for every page (issue 43): no text of a Dataset breaks the exported page, a lone surrogate
is written, and a long stored spectrum is thinned by a stated rule that keeps what the page draws."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from _browser import MARKS, chromium
from _stats_data import make_stats, with_spectra
from toolkit.widgets import export_html
from toolkit.widgets.chart_spec import BULK_RANKS, TAIL_RANKS, rank_sample
from toolkit.widgets.embed import json_for_html
from toolkit.widgets.export import page_data

PAYLOAD = "<!--<script>"
_SCRIPT = re.compile(r"<script([^>]*)>(.*?)</script>", re.S)


def hostile(payload: str = PAYLOAD, n_layers: int = 3):
    """A Dataset whose every text holds ``payload``: attrs, model name, long names, units, descriptions,
    component labels, a variable name, ``nan_reason``."""
    ds = with_spectra(make_stats(n_layers, source=f"org/{payload}model"))
    ds = ds.assign_coords(component=[f"{c}{payload}" for c in ds["component"].values],
                          nan_reason=ds["nan_reason"].copy(data=np.full(ds["nan_reason"].shape, payload)))
    ds.attrs.update({k: f"{v}{payload}" for k, v in ds.attrs.items() if isinstance(v, str)}, note=payload)
    for name in ds.data_vars:
        ds[name].attrs.update({k: f"{v}{payload}" for k, v in ds[name].attrs.items() if isinstance(v, str)})
    first = next(n for n in ds.data_vars if n != "eigenvalues")
    return ds.rename({first: f"{first}{payload}"})


def _scripts(text: str) -> list[tuple[str, str]]:
    return _SCRIPT.findall(text)


@pytest.mark.parametrize("payload", [PAYLOAD, "</script><script>alert(1)</script>", "<!--", "a&b>c\u2028\u2029"])
def test_no_text_of_the_dataset_leaves_markup_in_a_script_element(payload, tmp_path):
    """The script elements' content holds no ``<`` at all, so the tokenizer cannot leave script data before
    the element's own end tag; JSON.parse (here json.loads) reads every text back as it was."""
    path = export_html([hostile(payload), hostile(payload)], tmp_path / "p.html",
                       labels=[f"a{payload}", f"b{payload}"], title=f"t{payload}")
    text = path.read_text(encoding="utf-8")
    scripts = _scripts(text)
    assert [attrs for attrs, _ in scripts] == [' type="application/json" id="toolkit-data"',
                                               ' type="application/json" id="toolkit-modules"', ' type="module"']
    assert text.count("<script") == 3 and text.count("</script>") == 3
    for _, body in scripts[:2]:
        assert not set("<>&\u2028\u2029") & set(body), body[:200]
    page = json.loads(scripts[0][1])
    shown = json.dumps(page, ensure_ascii=False)
    assert f"a{payload}" in page["heatmaps"][page["metrics"][0]]["panels"][0]["title"]
    assert payload in shown and len(page["drilldowns"]) == 2 * 3 * 7


def test_json_for_html_reads_back_as_it_was():
    data = {"t": "<!--<script></script>&\u2028\u2029\U0001f600", "n": [1.0, float("nan"), np.float32(0.5)]}
    text = json_for_html(data)
    assert text.isascii() and not set("<>&") & set(text)
    assert json.loads(text) == {"t": data["t"], "n": [1.0, None, 0.5]}


def test_a_lone_surrogate_in_a_title_or_label_is_written(tmp_path):
    ds = with_spectra(make_stats(2))
    path = export_html([ds, ds], tmp_path / "s.html", labels=["a\ud800", "b\udfff"], title="t\udc80")
    text = path.read_text(encoding="utf-8")
    assert "<title>t\ufffd</title>" in text
    page = json.loads(_scripts(text)[0][1])
    assert page["heatmaps"][page["metrics"][0]]["panels"][0]["title"].startswith("a\ud800")


def test_a_long_spectrum_is_thinned_keeping_the_tail_and_the_histogram_exact():
    n, tail = 200_000, 3000
    ds = with_spectra(make_stats(2), n=n)
    lam_all = ds["eigenvalues"].values
    ds["alpha"] = (("layer", "component"), np.full(lam_all.shape[:2], 2.5), {"long_name": "alpha", "units": "1"})
    ds["alpha_xmin"] = (("layer", "component"), lam_all[..., tail - 1], {"long_name": "xmin", "units": "1"})
    page = page_data(ds)
    raw = json_for_html(page)
    assert len(raw) < 3_000_000  # was 8 MB for these 14 cells (51 MB for a real model's 210)
    key = "0,1,2"
    esd, sv = page["drilldowns"][key]["panels"]
    assert sum(esd["series"][0]["counts"]) == n  # the histogram counts every eigenvalue
    lam = ds["eigenvalues"].values[1, 2]
    assert [x["role"] for x in esd["series"]] == ["esd", "fit", "xmin", "xmax"]
    assert int(np.count_nonzero(lam >= float(ds["alpha_xmin"][1, 2]))) == tail
    x, y = np.array(sv["series"][0]["x"]), np.array(sv["series"][0]["y"])
    assert len(x) <= BULK_RANKS + tail + 1 < n
    np.testing.assert_array_equal(x[:tail], np.arange(1, tail + 1))  # every fitted eigenvalue, exact
    np.testing.assert_allclose(y[:tail], np.sqrt(lam[:tail]), rtol=1e-6)
    assert x[-1] == n and y[-1] == pytest.approx(np.sqrt(lam[-1]), rel=1e-6)


def test_the_rank_rule():
    assert rank_sample(np.arange(10.0)[::-1], 5.0).tolist() == list(range(10))  # short spectra whole
    lam = np.geomspace(100, 1, 100_000)
    keep = rank_sample(lam, 90.0)
    tail = int(np.count_nonzero(lam >= 90.0))
    assert 2000 < tail < TAIL_RANKS and keep[:tail].tolist() == list(range(tail)) and keep[-1] == lam.size - 1
    assert np.all(np.diff(keep) > 0) and len(keep) <= BULK_RANKS + tail + 1
    keep = rank_sample(lam, 10.0)  # a tail longer than TAIL_RANKS: its first TAIL_RANKS exact, the rest thinned
    assert keep[:TAIL_RANKS].tolist() == list(range(TAIL_RANKS)) and len(keep) <= BULK_RANKS + TAIL_RANKS + 1


def _in_a_browser(fn):
    for mark in MARKS:
        fn = mark(fn)
    return fn


@_in_a_browser
def test_the_hostile_page_renders_in_a_browser(tmp_path):
    path = export_html(hostile(), tmp_path / "p.html", title=f"t{PAYLOAD}")
    with chromium(tmp_path, 1200, 800) as tab:
        errors = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready=true]", timeout=30_000)
        assert tab.locator("#toolkit-heatmap svg rect").count() > 0
        assert PAYLOAD in tab.locator("h3").inner_text()
    assert not errors, errors
