"""The explorer's "fit" menu: WeightWatcher's ``fix_fingers`` and ``xmax``, as :class:`~toolkit.FitOptions` takes them.

Choosing an entry refits ``alpha`` and every column of its fit (the interval, the
tail's count and range, ...) from the Datasets' stored spectra
(:func:`toolkit.collect.refit.refit`; ``weight_stats(..., keep_spectra=True)``),
once per entry (kept), and the explorer shows the refitted Datasets; an opened
cell's drill-down draws the new fit. Without stored spectra the menu is disabled
and its tooltip says how to get them; without a fit column it is hidden.
"""

from __future__ import annotations

from dataclasses import fields

import ipywidgets as W

from toolkit.metrics.fit_options import FIT_KEYS, FitOptions

#: The menu: label -> the fit options it sets (the fit's others at their defaults).
CHOICES = {
    "default": {},
    "xmax=1: largest eigenvalue left out": {"xmax": 1},
    "fix_fingers='xmin_peak'": {"fix_fingers": "xmin_peak"},
    "fix_fingers='clip_xmax'": {"fix_fingers": "clip_xmax"},
}
TOOLTIP = ("WeightWatcher's fit options (toolkit.FitOptions): refit alpha and its columns from the stored spectra")
NO_SPECTRA = "refitting needs the stored spectra: weight_stats(..., keep_spectra=True)"


def _fit_keys(fit: FitOptions) -> dict:
    """The options of the fit itself (``fix_fingers``, ``xmax`` ...), not the skip rules or the seed."""
    return {k: getattr(fit, k) for k in FIT_KEYS}


def describe(fit: FitOptions) -> str:
    """``fit``'s options away from the defaults, as a menu label (``"fix_fingers='clip_xmax', max_fingers=5"``)."""
    default = FitOptions()
    changed = [f"{f.name}={getattr(fit, f.name)!r}" for f in fields(fit)
               if f.name in FIT_KEYS and getattr(fit, f.name) != getattr(default, f.name)]
    return ", ".join(changed) or "default"


class FitChoice:
    """The menu and the Datasets of each of its entries.

    Parameters
    ----------
    models : list of (str, xarray.Dataset)
        As measured.
    fit : FitOptions, dict or None
        The entry to start from; None: the options the (first) Dataset records.

    Attributes
    ----------
    dropdown : ipywidgets.Dropdown
    models : list of (str, xarray.Dataset)
        The Datasets of the entry chosen.
    """

    def __init__(self, models, fit=None):
        self.dropdown = W.Dropdown(description="fit", style={"description_width": "initial"}, tooltip=TOOLTIP,
                                   layout=W.Layout(width="max-content"))
        self._listeners = []
        self.reset(models, fit)
        self.dropdown.observe(self._changed, names="value")

    def reset(self, models, fit=None, *, enabled: bool = True) -> None:
        """Start again from ``models`` as measured (the live view's newer cells), on entry ``fit``."""
        from toolkit.collect.refit import fit_metrics

        self._measured = list(models)
        recorded = FitOptions.from_attrs(self._measured[0][1].attrs)
        wanted = FitOptions.coerce(fit, "toolkit.widgets.explore") if fit is not None else recorded
        # an entry sets the whole fit (the others at their defaults); skip rules and seed as measured
        base = {**vars(recorded), **_fit_keys(FitOptions())}
        self._options = {label: FitOptions(**{**base, **opts}) for label, opts in CHOICES.items()}
        self._chosen = next((lab for lab, f in self._options.items() if _fit_keys(f) == _fit_keys(wanted)), None)
        if self._chosen is None:
            self._chosen = describe(wanted)
            self._options = {self._chosen: wanted, **self._options}
        measured_label = next((lab for lab, f in self._options.items() if _fit_keys(f) == _fit_keys(recorded)))
        self._cache = {measured_label: self._measured}
        fitted = all(fit_metrics(ds) for _, ds in self._measured)
        spectra = all("eigenvalues" in ds for _, ds in self._measured)
        if not spectra and _fit_keys(wanted) != _fit_keys(recorded):
            from toolkit.errors import ToolkitError

            raise ToolkitError(f"fit={describe(wanted)} differs from the options the Dataset was measured with "
                               f"({describe(recorded)}): {NO_SPECTRA}")
        self.models = self._models(self._chosen) if spectra else self._measured
        d = self.dropdown
        self._quiet = True
        try:
            d.options = list(self._options)
            d.value = self._chosen if spectra else measured_label
        finally:
            self._quiet = False
        self._spectra = spectra
        self.enable(enabled)
        d.tooltip = TOOLTIP if spectra else NO_SPECTRA
        d.layout.display = "" if fitted else "none"

    def enable(self, enabled: bool) -> None:
        """Let the menu be used (``enabled``, and there are spectra to refit), or not (a pass still measuring)."""
        self.dropdown.disabled = not (enabled and self._spectra)

    def on_change(self, callback) -> None:
        """Call ``callback(models)`` after another entry is chosen."""
        self._listeners.append(callback)

    def choose(self, label: str) -> None:
        """Choose an entry of :data:`CHOICES` (or the first one, of a ``fit=`` given) as the menu does."""
        if label not in self._options:
            raise ValueError(f"no fit entry {label!r}; the menu has {list(self._options)}")
        self.dropdown.value = label

    @property
    def fit(self) -> FitOptions:
        """The options of the entry shown."""
        return self._options[self.dropdown.value]

    def _models(self, label: str):
        if label not in self._cache:
            from toolkit.collect.refit import refit

            self._cache[label] = [(name, refit(ds, self._options[label])) for name, ds in self._measured]
        return self._cache[label]

    def _changed(self, change) -> None:
        if self._quiet or change["new"] is None:
            return
        self.models = self._models(change["new"])
        for callback in self._listeners:
            callback(self.models)
