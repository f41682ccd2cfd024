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
- :func:`layer_lines` -- a metric per layer over training steps, for one component (a watched run).
- :func:`esd` -- one cell's empirical spectral density with its power-law fit
  (:func:`prepare_esd`, :func:`draw_esd`).
"""

from __future__ import annotations

from toolkit._lazy import lazy_getattr

# No submodule is named like a function of this package (``heatmap_figure``
# holds ``heatmap``), so importing a submodule never replaces the function.
_LAZY = {
    "heatmap": "toolkit.plot.heatmap_figure",
    "prepare_heatmap": "toolkit.plot.heatmap_figure",
    "draw_heatmap": "toolkit.plot.heatmap_figure",
    "HeatmapData": "toolkit.plot.heatmap_figure",
    "heatmaps": "toolkit.plot._panels",
    "metric_names": "toolkit.plot._select",
    "layer_grid": "toolkit.plot.layer_grid_figure",
    "prepare_layer_grid": "toolkit.plot.layer_grid_figure",
    "draw_layer_grid": "toolkit.plot.layer_grid_figure",
    "training_curves": "toolkit.plot.layer_grid_figure",
    "component_lines": "toolkit.plot.lines",
    "prepare_component_lines": "toolkit.plot.lines",
    "draw_component_lines": "toolkit.plot.lines",
    "ComponentLinesData": "toolkit.plot.lines",
    "layer_lines": "toolkit.plot.layer_lines_figure",
    "prepare_layer_lines": "toolkit.plot.layer_lines_figure",
    "draw_layer_lines": "toolkit.plot.layer_lines_figure",
    "LayerLinesData": "toolkit.plot.layer_lines_figure",
    "esd": "toolkit.plot.esd_figure",
    "prepare_esd": "toolkit.plot.esd_figure",
    "draw_esd": "toolkit.plot.esd_figure",
    "ESDData": "toolkit.plot.esd_figure",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr("toolkit.plot", _LAZY, globals())


def __dir__():
    return sorted(set(globals()) | set(__all__))
