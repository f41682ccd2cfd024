"""The form above a live pass (:func:`toolkit.widgets.explore_model`): a model box, the selection as text
(``layers`` ``0:28:4``, ``components`` ``attn.*``, ``experts``) and the Measure / Stop-Resume buttons, so
a page without code (Voilà) can measure what its reader chooses."""

from __future__ import annotations

import ipywidgets as W

from toolkit.widgets import _controls as C

SELECTION_KEYS = ("layers", "components", "experts")


def text_of(value) -> str:
    """A selection as the form's text (``slice(0, 28, 4)`` -> ``0:28:4``)."""
    if value is None:
        return ""
    if isinstance(value, slice):
        return ":".join("" if v is None else str(v) for v in (value.start, value.stop, value.step)).rstrip(":")
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, range)):
        return ",".join(map(str, value))
    return str(value)


def _box(value, placeholder, description, width, tooltip):
    return W.Text(value=value, placeholder=placeholder, description=description, style=C.WIDE,
                  layout=W.Layout(width=width), tooltip=tooltip)


def make_form(source, selection: dict) -> dict:
    """The form's widgets: ``source``, ``layers``, ``components``, ``experts`` (text), ``compute`` and
    ``stop`` (buttons; ``stop`` reads Resume after a Stop)."""
    return {
        "source": _box("" if source is None else str(source), "the embedded SmolLM2-135M", "model", "26em",
                       "a hub id, a folder of safetensors or a .gguf file"),
        "layers": _box(text_of(selection.get("layers")), "all", "layers", "10em", "3, -1, 0,4,8 or 0:28:4"),
        "components": _box(text_of(selection.get("components")), "all", "components", "16em",
                           "attn.q,mlp.router, attn.* or attn"),
        "experts": _box(text_of(selection.get("experts")), "all", "experts", "9em", "routed experts: 3 or 0:8"),
        "compute": C.button("Measure", "play", "measure this model and selection (cells already measured come "
                                               "from the cache)"),
        "stop": C.button("Stop", "stop", "stop after the tensor being measured; the finished cells stay, and "
                                         "Resume continues from them"),
    }


def form_row(form: dict) -> W.HBox:
    return W.HBox([form[k] for k in ("source", *SELECTION_KEYS, "compute", "stop")],
                  layout=W.Layout(flex_flow="row wrap", align_items="center"))


def read_form(form: dict) -> dict:
    """The form's source and selection.

    Raises
    ------
    InvalidOptionError
        Text that is no selection (``layers`` "abc", "1.5", an empty component name).
    """
    from toolkit.collect.plan.selection import parse_index, parse_names
    from toolkit.errors import InvalidOptionError

    got = {"source": form["source"].value.strip() or None}
    for key, parse in (("layers", parse_index), ("components", parse_names), ("experts", parse_index)):
        text = form[key].value.strip()
        try:
            got[key] = parse(text) if text else None
        except ValueError:
            expected = ("names separated by commas (attn.q,mlp.up; patterns such as attn.*)" if key == "components"
                        else "an index (3, -1), a list (0,4,8) or a slice (0:28:4)")
            raise InvalidOptionError(key, text, expected, "toolkit.explore_model form") from None
    return got


def show_selection(form: dict, stats_kws: dict) -> None:
    """Put the selection being measured into the form's boxes."""
    for key in SELECTION_KEYS:
        form[key].value = text_of(stats_kws.get(key))


def set_button(form: dict, mode: str) -> None:
    """The Stop button as ``"stop"``, ``"resume"`` or ``"off"`` (nothing to stop or resume)."""
    button = form["stop"]
    button.description, button.icon = ("Resume", "play") if mode == "resume" else ("Stop", "stop")
    button.disabled = mode == "off"
