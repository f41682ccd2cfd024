"""Train your own attention activation next to softmax: a menu, an epoch count, Run, a progress bar, the curves.

The classroom form of notebook 04's last section, for a page with no code (Voilà). Run trains in a
background thread (:func:`toolkit.lab.run_experiment`, one activation after the other), so the page and
its kernel stay live: the progress bar moves after every epoch, and the result is drawn by the browser
(:class:`~toolkit.widgets.chart_view.ChartView` over
:func:`~toolkit.plot.layer_grid_figure.prepare_layer_grid`'s numbers). No matplotlib runs in the
thread (matplotlib is not thread-safe): the static PNG for viewers without widgets is drawn in the
kernel's own thread, scheduled on its io_loop when the run ends (or by :meth:`TrainYourOwn.wait` there).
"""

from __future__ import annotations

import base64
import html
import threading

import ipywidgets as W

from toolkit.constraints import Check, Flag, OneOf, Text, Whole, checks_options
from toolkit.errors import InvalidOptionError, ToolkitError
from toolkit.lab.attention import parse_activation
from toolkit.lab.train import PRESETS
from toolkit.widgets.main_thread import in_main_thread, kernel_loop

#: The activations the menu offers, each trained next to softmax.
CHOICES = ("x/1", "x/16", "x³/1", "x³/16", "x²/4", "x²/√N")
#: Said with every result: what a few fast epochs' accuracy is worth.
WARNING = ("A few fast epochs on 512 images: the accuracy printed here means nothing yet (it may still be at "
           "chance, 10 %). Compare the attention norms, not the accuracies; the committed 200-epoch runs say "
           "what each activation finally reaches.")


def _lab_fields(value: dict, where: str) -> dict:
    """``**kwargs`` of :func:`train_your_own`: fields of :class:`toolkit.lab.LabConfig`, refused by name."""
    from dataclasses import fields

    from toolkit.lab.train import LabConfig

    known = [f.name for f in fields(LabConfig) if f.name not in ("epochs", "seed")]
    for name, given in value.items():
        if name not in known:
            raise InvalidOptionError(name, given, f"left out: it is no field of toolkit.lab.LabConfig, which has "
                                     f"{', '.join(known)}", where)
    return value


class TrainYourOwn:
    """The train-your-own panel; build it with :func:`train_your_own`.

    Attributes
    ----------
    controls : dict of str -> ipywidgets.Widget
        ``activation`` (Dropdown of :data:`CHOICES`), ``epochs`` (IntSlider), ``run`` (Button).
    progress : ipywidgets.IntProgress
        Epochs trained so far, over every activation of the run.
    status : ipywidgets.HTML
        What runs now, then the test accuracies with :data:`WARNING`, or the error.
    chart : ChartView
        Each layer's attention norm over the epochs, one line per activation.
    widget : ipywidgets.VBox
        The whole panel.
    result : xarray.Dataset or None
        The last finished run (:func:`toolkit.lab.run_experiment`'s Dataset).
    error : BaseException or None
        What the last run raised.
    runs : int
        Runs started.
    """

    def __init__(self, activation: str = "x²/4", *, epochs: int = 8, max_epochs: int = 40, preset: str = "fast",
                 seed: int = 0, background: bool = True, **overrides):
        self.preset, self.seed, self.background, self.overrides = preset, seed, background, overrides
        parse_activation(activation)  # an activation it cannot read is refused here, not at the first Run
        choices = list(CHOICES) + ([activation] if activation not in CHOICES else [])
        self.controls = c = {
            "activation": W.Dropdown(options=choices, value=activation, description="activation",
                                     style={"description_width": "initial"}, layout=W.Layout(width="max-content")),
            "epochs": W.IntSlider(value=epochs, min=1, max=max(max_epochs, epochs), description="epochs",
                                  style={"description_width": "initial"}),
            "run": W.Button(description="Run", icon="play", button_style="primary",
                            tooltip="train softmax and the chosen activation, one after the other"),
        }
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="240px"))
        self.status = W.HTML()
        from toolkit.widgets.chart_view import ChartView

        self.chart = ChartView()
        self.chart.add_class("toolkit-lab-train-chart")
        self.widget = W.VBox([W.HBox([c["activation"], c["epochs"], c["run"], self.progress],
                                     layout=W.Layout(flex_flow="row wrap", align_items="center")),
                              self.status, self.chart])
        self.widget.add_class("toolkit-lab-train")
        self.result, self.error, self.runs = None, None, 0
        self._done = threading.Event()
        self._done.set()
        self._thread: threading.Thread | None = None
        self._handle, self._png = None, b""
        c["run"].on_click(lambda _button: self.run())

    # -- running ---------------------------------------------------------------
    def run(self) -> TrainYourOwn:
        """Train softmax and the chosen activation for the chosen epochs (in a thread with ``background``).

        A click while a run is going does nothing. Returns the panel (:meth:`wait` for the Dataset).
        """
        if not self._done.is_set():
            return self
        activation = self.controls["activation"].value
        epochs = int(self.controls["epochs"].value)
        labels = list(dict.fromkeys(["softmax", parse_activation(activation).label]))
        self.runs += 1
        self._done.clear()
        self.result, self.error, self._png = None, None, b""
        self._busy(True)
        self.progress.max, self.progress.value = len(labels) * epochs, 0
        self.progress.bar_style = ""
        self.chart.show({})
        self.status.value = f"training {html.escape(' and '.join(labels))} for {epochs} epochs each \u2026"
        if self.background:
            self._thread = threading.Thread(target=self._train, args=(labels, epochs), name="toolkit-lab-train",
                                            daemon=True)
            self._thread.start()
        else:
            self._train(labels, epochs)
        return self

    def _train(self, labels: list, epochs: int) -> None:
        """The run itself (in the thread): train, then put the numbers in the chart; never draws matplotlib."""
        from toolkit.lab import run_experiment

        def step(label, epoch):
            self.progress.value = min(self.progress.max, self.progress.value + 1)
            self.status.value = f"training <b>{html.escape(label)}</b>: epoch {epoch} of {epochs} \u2026"

        try:
            ds = run_experiment(labels, epochs=epochs, preset=self.preset, seed=self.seed, out=None,
                                checkpoints=False, callback=step, **self.overrides)
            self._show(ds)
            if kernel_loop() is not None:  # the PNG for viewers without widgets (a saved notebook), drawn by the
                in_main_thread(self._show_static)  # kernel's thread: matplotlib is not thread-safe
        except Exception as err:  # noqa: BLE001 - a thread has nowhere else to report
            self.error = err
            self.progress.bar_style = "danger"
            kind = "" if isinstance(err, ToolkitError) else f"{type(err).__name__}: "
            self.status.value = f"<span style='color:#b34d00'>{html.escape(kind + str(err))}</span>"
        finally:
            self._busy(False)
            self._done.set()

    def _show(self, ds) -> None:
        from toolkit.plot.layer_grid_figure import prepare_layer_grid
        from toolkit.widgets import chart_spec

        self.chart.show(chart_spec.layer_grid(prepare_layer_grid(ds, "attention_norm")))
        self.result = ds
        self.progress.bar_style = "success"
        self.status.value = (f"test accuracy after {int(ds.sizes['epoch']) - 1} epochs: {self.accuracy_text()}"
                             f"<br><i>{html.escape(WARNING)}</i>")

    def accuracy_text(self) -> str:
        """``"softmax 10.3 %, x²/4 12.5 %"``: the last epoch's test accuracy of each activation ('' before a run)."""
        if self.result is None:
            return ""
        last = self.result["test_accuracy"].isel(epoch=-1)
        return ", ".join(f"{a} {100 * float(last.sel(activation=a)):.1f} %" for a in last["activation"].values)

    def _busy(self, busy: bool) -> None:
        run = self.controls["run"]
        run.description, run.icon = ("Training\u2026", "hourglass-half") if busy else ("Run", "play")
        for w in self.controls.values():
            w.disabled = busy

    def wait(self, timeout: float | None = None):
        """Wait for the run; return its Dataset (None before any run).

        In the kernel's own thread this also draws the static PNG of the result (matplotlib, for
        viewers without widgets) and puts it in the displayed output.

        Raises
        ------
        TimeoutError
            Still training after ``timeout`` seconds.
        Whatever :func:`toolkit.lab.run_experiment` raised.
        """
        if not self._done.wait(timeout):
            raise TimeoutError("the lab run is still training")
        if self.error is not None:
            raise self.error
        if threading.current_thread() is threading.main_thread():
            self._show_static()
        return self.result

    def _show_static(self) -> None:
        """Draw the result's PNG (in the kernel's own thread) and put it in the displayed output."""
        if self.result is None:
            return
        self.figure_png()
        if self._handle is not None:
            self._handle.update(self._repr_mimebundle_(), raw=True)

    # -- display ---------------------------------------------------------------
    def figure_png(self) -> bytes:
        """PNG of the last result's layer grid (drawn once; call in the kernel's own thread)."""
        if self.result is not None and not self._png:
            from toolkit.plot.layer_grid_figure import prepare_layer_grid
            from toolkit.widgets.lab import grid_png

            self._png = grid_png(prepare_layer_grid(self.result, "attention_norm"))
        return self._png

    def _repr_mimebundle_(self, **kwargs):
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self._png:
            bundle["image/png"] = base64.b64encode(self._png).decode("ascii")
        bundle["text/plain"] = f"TrainYourOwn({self.controls['activation'].value!r})"
        return bundle

    def _ipython_display_(self):
        from IPython.display import display

        if self._done.is_set() and self.result is not None:
            self.figure_png()
        self._handle = display(self._repr_mimebundle_(), raw=True, display_id=True)


@checks_options(activation=Text("an attention activation, e.g. 'x²/4'"), epochs=Whole(minimum=1),
                max_epochs=Whole(minimum=1), preset=OneOf(tuple(PRESETS)),
                seed=Whole(minimum=0), run=Flag(), background=Flag(), kwargs=Check(_lab_fields, {"bogus": 1}))
def train_your_own(activation: str = "x²/4", *, epochs: int = 8, max_epochs: int = 40, preset: str = "fast",
                   seed: int = 0, run: bool = False, background: bool = True, **kwargs) -> TrainYourOwn:
    """A panel that trains an attention activation next to softmax and draws each layer's attention norm.

    Parameters
    ----------
    activation : str
        Chosen first in the menu (:data:`CHOICES`, plus this one if it is not among them).
    epochs : int, default 8
        First value of the epochs slider.
    max_epochs : int, default 40
        The slider's end.
    preset : str, default "fast"
        :data:`toolkit.lab.PRESETS` name: the fast preset trains a 12-layer, width-16 ViT on 512
        images (a few seconds an epoch on one core).
    seed : int, default 0
        Weights and shuffling (the same weights for both activations).
    run : bool, default False
        Start training at once (a classroom page that shows a result without a click).
    background : bool, default True
        Train in a thread, so the page stays live; False trains in the caller (tests, scripts).
    **kwargs
        Fields of :class:`toolkit.lab.LabConfig` to change (``train_subset``, ``depth``, ...).

    Returns
    -------
    TrainYourOwn
        Displays itself as its panel; ``.wait()`` returns the run's Dataset.

    Raises
    ------
    InvalidOptionError
        An option it cannot take, a keyword that is no ``LabConfig`` field (before any work).

    Examples
    --------
    >>> panel = train_your_own("x³/16", epochs=4)  # doctest: +SKIP
    >>> panel.run().wait()["attention_norm"].sizes  # doctest: +SKIP
    """
    panel = TrainYourOwn(activation, epochs=epochs, max_epochs=max_epochs, preset=preset, seed=seed,
                         background=background, **kwargs)
    if run:
        panel.run()
    return panel
