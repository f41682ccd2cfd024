"""A text box and a Run button: one text's activation statistics as heatmaps, model loaded once.

The figure is drawn on a fresh, pyplot-free ``Figure`` and written into the
output area's ``outputs`` (as :class:`~toolkit.widgets.explorer.Explorer`
does); nothing is captured with ``with output:``. Capturing inside a cell is
what made notebook 03 stall headless in about half the runs: a headless
runner (nbclient, hence ``jupyter nbconvert --execute`` and papermill) plays
the Output widget's front end and mirrors every captured output back to the
kernel on the shell socket, from its IOPub reader, while its reply reader
awaits the cell's ``execute_reply`` on that same socket. jupyter_client sends
through a blocking shadow of the asyncio socket, which bypasses pyzmq's
edge-triggered bookkeeping; a reply that arrives just before such a send loses
its wake-up, and the runner sleeps until the cell timeout (when its last poll
finds the reply). Setting ``outputs`` sends nothing on the shell socket.
"""

from __future__ import annotations

import base64
import html
import io
import time

import ipywidgets as W

from toolkit.constraint_types import Exempt
from toolkit.constraints import Flag, Text, Whole, checks_options
from toolkit.errors import ToolkitError

#: The statistics drawn side by side, with the colour scale each opens on and whether its limits are robust:
#: the largest activation is the top of its scale, never clipped at the 98th percentile (notebook 03, section 3).
PANELS = (("max_abs_activation", "log", False), ("attention_sink_mass", "auto", True))  # a share: no centre
DEFAULT_TEXT = "The capital of France is Paris. The capital of Germany is"


def preview(text: str, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters (an ellipsis marks the cut)."""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "\u2026"


class PromptBox:
    """A text box, a Run button and the heatmaps of that text's statistics.

    Built by :func:`prompt_box`. While a text runs the button is disabled and
    reads "Running…", the old figure is gone and the status line names the
    text; then the figure (its title names the text and its token count)
    replaces it, or the status line shows the error.

    Attributes
    ----------
    box : ipywidgets.Textarea
    button : ipywidgets.Button
    status : ipywidgets.HTML
    output : ipywidgets.Output
        Holds exactly one figure (or nothing while running).
    widget : ipywidgets.VBox
        The whole panel.
    result : xarray.Dataset or None
        The statistics of the last text run (None after an error).
    runs : int
        Texts run so far (successful or not).
    """

    def __init__(self, model, text: str = DEFAULT_TEXT, *, max_tokens: int = 128, panels=PANELS, dpi: int = 100,
                 **stats_kws):
        self.model, self.max_tokens, self.panels, self.dpi, self.stats_kws = model, max_tokens, panels, dpi, stats_kws
        self.box = W.Textarea(value=text, layout=W.Layout(width="90%", height="70px"))
        self.button = W.Button(description="Run", icon="play", button_style="primary",
                               tooltip="run the text through the model (no gradients)")
        self.status = W.HTML()
        self.output = W.Output(layout=W.Layout(min_height="300px"))
        self.widget = W.VBox([self.box, W.HBox([self.button, self.status]), self.output])
        self.result, self.runs, self._png = None, 0, b""
        self.button.on_click(lambda _button: self.run())

    def run(self, text: str | None = None):
        """Run ``text`` (default: the box's) and show its figure.

        Returns
        -------
        xarray.Dataset or None
            As :func:`toolkit.activations.activation_stats` gives it for the
            one text; None when the toolkit refused the text (the status line
            says why).
        """
        from toolkit.activations import activation_stats

        text = self.box.value if text is None else text
        self.runs += 1
        self._busy(True)
        self.output.outputs = ()  # the old figure must not sit under the new text
        self.status.value = f"Running <i>{html.escape(preview(text))}</i> \u2026"
        start = time.monotonic()
        try:
            one = activation_stats(self.model, [text], max_tokens=self.max_tokens, gradients=False,
                                   progress=False, **self.stats_kws)
            png = self.figure_png(one, text)
        except ToolkitError as err:
            self.result, self._png = None, b""
            self.status.value = f"<span style='color:#b34d00'>{html.escape(str(err))}</span>"
            return None
        finally:
            self._busy(False)
        self.result, self._png = one, png
        self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": base64.b64encode(png).decode("ascii"),
                                         "text/plain": f"<activation heatmaps of {preview(text)!r}>"}},)
        self.status.value = (f"{int(one.attrs['num_tokens'])} tokens of <i>{html.escape(preview(text))}</i> "
                             f"in {time.monotonic() - start:.1f} s")
        return one

    def title(self, ds, text: str) -> str:
        """The figure's title: the text (cut) and its token count."""
        return f"\u201c{preview(text)}\u201d ({int(ds.attrs['num_tokens'])} tokens)"

    def figure_png(self, ds, text: str) -> bytes:
        """PNG bytes of the panels' heatmaps for ``ds``, titled by :meth:`title`."""
        from matplotlib.figure import Figure

        from toolkit.plot import heatmap

        fig = Figure(figsize=(5.5 * len(self.panels), 6), layout="constrained")
        for ax, (metric, scale, *robust) in zip(fig.subplots(1, len(self.panels), squeeze=False)[0], self.panels,
                                                strict=True):
            heatmap(ds, metric, ax=ax, scale=scale, robust=robust[0] if robust else True)
        fig.suptitle(self.title(ds, text))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=self.dpi)
        return buf.getvalue()

    def _busy(self, busy: bool) -> None:
        self.button.description, self.button.icon = ("Running\u2026", "hourglass-half") if busy else ("Run", "play")
        self.button.disabled = busy

    def _repr_mimebundle_(self, **kwargs):
        """The live panel, plus a PNG of the current figure for viewers without widgets."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self._png:
            bundle["image/png"] = base64.b64encode(self._png).decode("ascii")
        return bundle


@checks_options(model=Exempt("a checkpoint or loaded model, as activation_stats takes it (its typed errors)"),
                text=Text("the box's first text", empty=True), max_tokens=Whole(minimum=2), run=Flag(),
                kwargs=Exempt("options of activation_stats (which declares them), passed on at each run"))
def prompt_box(model, text: str = DEFAULT_TEXT, *, max_tokens: int = 128, run: bool = True, **kwargs) -> PromptBox:
    """A text box with a Run button over :func:`~toolkit.activations.activation_stats`.

    Parameters
    ----------
    model : Loaded, transformers model, str or None
        What :func:`~toolkit.activations.activation_stats` accepts; pass a
        :func:`~toolkit.activations.load_model` result so each Run reuses it.
    text : str
        The box's first text.
    max_tokens : int, default 128
        The text is cut to this many tokens.
    run : bool, default True
        Run the first text now, so the figure is there without a click.
    **kwargs
        ``panels`` (statistic, colour scale and, optionally, robust limits
        (default True); default :data:`PANELS`), ``dpi``, and options of ``activation_stats``
        (``attention``, ``mapping``...). Gradients are never computed.

    Returns
    -------
    PromptBox
        Displaying it shows the panel; ``.result`` holds the last statistics.

    Notes
    -----
    A text the toolkit refuses (a :class:`~toolkit.errors.ToolkitError`, e.g.
    fewer than 2 tokens) raises nothing: the status line shows the message
    and ``.result`` is None.

    Examples
    --------
    >>> m = load_model()                              # doctest: +SKIP
    >>> prompt_box(m, "def f(x):\\n    return x")      # doctest: +SKIP
    """
    box = PromptBox(model, text, max_tokens=max_tokens, **kwargs)
    if run:
        box.run()
    return box
