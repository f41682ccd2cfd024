"""The prompt box of notebook 03: one text's statistics, a busy sign, one figure, a title naming the text."""

import base64

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from toolkit.activations import activation_stats  # noqa: E402
from toolkit.testing import tiny_model  # noqa: E402
from toolkit.widgets import prompt_box  # noqa: E402
from toolkit.widgets.prompt import preview  # noqa: E402


def char_tokenizer(text, add_special_tokens=True, truncation=True, max_length=None):
    """One token per character (ids 3..98): a tokenizer with no files to load."""
    ids = [3 + ord(c) % 96 for c in text]
    return {"input_ids": ids[:max_length] if truncation and max_length else ids}


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen2", num_layers=2)


def shown(box):
    """The output area's items as (output_type, mime types)."""
    return [(o["output_type"], sorted(o.get("data", {}))) for o in box.output.outputs]


def test_first_text_runs_and_shows_one_titled_figure(model):
    box = prompt_box(model, "The capital of France is", max_tokens=16, tokenizer=char_tokenizer)
    assert shown(box) == [("display_data", ["image/png", "text/plain"])]
    png = base64.b64decode(box.output.outputs[0]["data"]["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and box._repr_mimebundle_()["image/png"]
    assert box.result.attrs["num_tokens"] == 16  # cut to max_tokens
    assert box.title(box.result, box.box.value) == "\u201cThe capital of France is\u201d (16 tokens)"
    assert "16 tokens of <i>The capital of France is</i>" in box.status.value
    direct = activation_stats(model, ["The capital of France is"], tokenizer=char_tokenizer, max_tokens=16,
                              gradients=False, progress=False)
    np.testing.assert_array_equal(box.result.max_abs_activation.values, direct.max_abs_activation.values)
    np.testing.assert_array_equal(box.result.attention_sink_mass.values, direct.attention_sink_mass.values)
    assert not box.button.disabled and box.button.description == "Run"


def test_run_shows_a_busy_sign_and_drops_the_old_figure_first(model):
    box = prompt_box(model, "first text", tokenizer=char_tokenizer)
    events = []
    box.button.observe(lambda ch: events.append(("disabled", ch["new"], box.button.description)), "disabled")
    box.output.observe(lambda ch: events.append(("outputs", len(ch["new"]), box.button.disabled)), "outputs")
    box.status.observe(lambda ch: events.append(("status", ch["new"][:9], box.button.disabled)), "value")
    box.box.value = "second, longer text"
    box.button.click()
    assert events[:3] == [("disabled", True, "Running\u2026"), ("outputs", 0, True), ("status", "Running <", True)]
    assert "second, longer text" in box.status.value and box.runs == 2
    assert events[3:] == [("disabled", False, "Run"), ("outputs", 1, False), ("status", "19 tokens", False)]
    assert box.result.attrs["num_tokens"] == 19


def test_a_refused_text_is_reported_not_raised(model):
    box = prompt_box(model, "x", tokenizer=char_tokenizer)  # 1 token: no next token to predict
    assert box.result is None and box.output.outputs == ()
    assert "has 1 token(s); each text needs at least 2" in box.status.value
    assert not box.button.disabled and box.button.icon == "play"
    box.run("ok text")
    assert box.result is not None and len(box.output.outputs) == 1


def test_preview_is_one_cut_line():
    assert preview("a\n  b\tc") == "a b c"
    assert preview("x" * 100, width=10) == "x" * 9 + "\u2026"


def test_the_prompt_figure_does_not_clip_the_largest_activation(model, monkeypatch):
    """Issue 36, item 5: notebook 03's prompt figure clipped the massive activation its section 3 explains
    is not clipped (robust limits at the 98th percentile)."""
    import toolkit.plot

    calls = []
    real = toolkit.plot.heatmap
    monkeypatch.setattr(toolkit.plot, "heatmap", lambda *a, **k: calls.append(k) or real(*a, **k))
    box = prompt_box(model, "abc abc", tokenizer=char_tokenizer, max_tokens=16)
    assert box.result is not None
    assert len(calls) == 2
    assert calls[0]["robust"] is False and calls[0]["scale"] == "log"  # max |activation|: the true max on top
    assert calls[1]["robust"] is True
