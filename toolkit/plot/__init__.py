"""Figures of the toolkit: functions that take a Dataset and return Axes/Figures.

Everything is imported lazily, so ``import toolkit.plot`` does not import
matplotlib until a figure is drawn.

- :func:`heatmap` -- one layer x component heatmap (returns the Axes).
- :func:`heatmaps` -- several panels side by side (returns the Figure).
- :func:`prepare_heatmap` -- the numbers and labels of a heatmap, no drawing.
- :func:`draw_heatmap` -- draw a prepared :class:`HeatmapData`.
- :func:`layer_grid` -- one panel per layer, a line per series (the lab's figure 2);
  :func:`training_curves` -- loss/accuracy over training.
- :func:`component_lines` -- a metric per component along the layers.
"""

from __future__ import annotations

from toolkit._lazy import lazy_getattr
import sys
import types

_LAZY = {
    "heatmap": "toolkit.plot.heatmap",
    "prepare_heatmap": "toolkit.plot.heatmap",
    "draw_heatmap": "toolkit.plot.heatmap",
    "HeatmapData": "toolkit.plot.heatmap",
    "heatmaps": "toolkit.plot._panels",
    "metric_names": "toolkit.plot._select",
    "layer_grid": "toolkit.plot.layer_grid",
    "prepare_layer_grid": "toolkit.plot.layer_grid",
    "draw_layer_grid": "toolkit.plot.layer_grid",
    "training_curves": "toolkit.plot.layer_grid",
    "component_lines": "toolkit.plot.lines",
    "prepare_component_lines": "toolkit.plot.lines",
    "draw_component_lines": "toolkit.plot.lines",
    "ComponentLinesData": "toolkit.plot.lines",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr("toolkit.plot", _LAZY, globals())


class _PlotModule(types.ModuleType):
    """Keeps ``toolkit.plot.heatmap`` the function after its submodule is imported.

    Importing ``toolkit.plot.heatmap`` (the module) makes Python set the
    package attribute of the same name to the module; this stores the
    function of that name instead, so ``toolkit.plot.heatmap(ds)`` and
    ``toolkit.plot.layer_grid(...)`` always call the function.
    """

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == value.__name__ and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _PlotModule


def __dir__():
    return sorted(set(globals()) | set(__all__))
