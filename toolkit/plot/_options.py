"""The declarations plot's figure functions share (:mod:`toolkit.constraints`): axes, figures, sizes, titles,
centres, and the labels of the Dataset that the figures check themselves."""

from __future__ import annotations

from toolkit.constraint_types import AnyOf, DataOf, Exempt, Instance, Keywords
from toolkit.constraints import Check, Flag, Names, OneOf, Optional, Real, Size, Text, Whole
from toolkit.errors import InvalidOptionError
from toolkit.plot.scales import SCALE_CHOICES

__all__ = ["AX", "BINS", "CBAR", "CENTER", "DATA", "DS", "FIG", "FIGSIZE", "HEATMAP", "LABELS", "LAYER_GRID",
           "LEGEND", "PREPARED", "TITLE", "TITLES", "marker"]


def _marker(value, where):
    """A marker matplotlib draws (``"o"``, ``"s"``, ``None``...)."""
    from matplotlib.markers import MarkerStyle

    try:
        MarkerStyle(value)
    except (ValueError, TypeError):
        raise InvalidOptionError("marker", value, "a matplotlib marker, e.g. 'o', 's', '^' or None", where) from None
    return value


#: the statistics drawn
DATA = DataOf(array=True)
DS = DataOf()
#: a matplotlib Axes / Figure to draw into (None: a new one)
AX = Optional(Instance("matplotlib.axes.Axes", "a matplotlib Axes (e.g. from plt.subplots()), or None for a new one"))
FIG = Optional(Instance("matplotlib.figure.Figure", "a matplotlib Figure, or None for a new one"))
FIGSIZE = Optional(Size())
TITLE = Optional(Text("the figure's title", empty=True))
TITLES = Optional(Names("one title per panel"))
#: a diverging scale's centre
CENTER = Optional(AnyOf((OneOf(("median",)), Real()), "None (the metric's natural centre), 'median' or a finite "
                        "number"))
#: drawing switches of draw_heatmap
CBAR = {"annotate": Flag(), "cbar": Flag(), "cbar_kws": Optional(Keywords("matplotlib's colorbar"))}
#: labels of the Dataset, checked by the figure against the ones it has
LABELS = {
    "layers": Exempt("layer labels of the Dataset: a slice, (first, last) or a list (EmptyInputError naming the "
                     "known ones)"),
    "components": Exempt("column labels of the Dataset (EmptyInputError naming the known ones)"),
    "selection": Exempt("labels of the Dataset's other dims, e.g. checkpoint=0 (UnknownMetricError / "
                        "EmptyInputError naming the known ones)"),
    "activations": Exempt("activation labels of the lab result (EmptyInputError naming the known ones, or saying to "
                          "pick one)"),
    "head": Exempt("a head of the lab result, or 'mean' / 'max' (EmptyInputError naming the known ones)"),
}
#: what a prepare_* function returned, drawn by its draw_* twin
PREPARED = Exempt("the figure data a prepare_* function returns (its own dataclass; drawn as prepared)")
#: the options prepare_heatmap and heatmap share
HEATMAP = dict(data=DATA, metric=Optional(Text("a variable of the Dataset")), center=CENTER,
               scale=OneOf(SCALE_CHOICES), robust=Flag(), layers=LABELS["layers"], components=LABELS["components"],
               title=TITLE, vmin=Optional(Real()), vmax=Optional(Real()), log=Optional(Flag()),
               mark_width=Real(above=0.0, meaning="a fraction of alpha, e.g. 0.5"), selection=LABELS["selection"])
#: the options of a lab layer grid (prepare_layer_grid, layer_grid) but its scale
LAYER_GRID = dict(ds=DS, metric=Text("a variable of the lab result, e.g. 'attention_norm'"),
                  activations=LABELS["activations"], layers=LABELS["layers"], head=LABELS["head"],
                  ncols=Optional(Whole(minimum=1)), bound=Flag())
LEGEND = Optional(OneOf(("shared", "panel")))
marker = Check(_marker, "no such marker")
BINS = Whole(minimum=1, meaning="histogram bins")
