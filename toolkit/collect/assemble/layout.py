"""Where a cell sits in a Dataset: the rows (layers) and columns (components) it has."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Grid:
    """The ``layer`` and ``component`` coordinates of a Dataset, and each label's position.

    Attributes
    ----------
    layers : list of int
        Layer labels of the rows (all of the model's, or a selection).
    components : list of str
        Component labels of the columns.
    """

    layers: list
    components: list
    _rows: dict = field(init=False, repr=False, compare=False)
    _cols: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_rows", {layer: i for i, layer in enumerate(self.layers)})
        object.__setattr__(self, "_cols", {c: j for j, c in enumerate(self.components)})

    def at(self, layer: int, component: str) -> tuple[int, int]:
        """``(row, column)`` of a cell.

        Raises
        ------
        KeyError
            A layer or component the grid does not have (a cell outside the selection: a bug).
        """
        return self._rows[layer], self._cols[component]
