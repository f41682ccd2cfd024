"""Draw one image's patch tokens and its attention matrices (:class:`toolkit.lab.attention_maps.AttentionMaps`).

The numbers are computed by :func:`toolkit.lab.attention_maps.attention_maps`; nothing is computed here
but the colour limits. Softmax's matrix is a share (0 to 1, no centre): white to orange from 0. A
polynomial's entries carry the sign of the scores: blue-white-orange, white at 0, the same distance on
both sides. Each matrix has its own scale (their magnitudes differ by orders), said on its colour bar.
"""

from __future__ import annotations

import numpy as np

from toolkit.plot._style import cmap
from toolkit.plot.numbers import format_value

#: What the token axes are called.
TOKEN_NOTE = "token 0 = class token, 1-16 = patches row by row"


def matrix_limits(matrix: np.ndarray) -> tuple[float, float, str]:
    """Colour limits and scale of one attention matrix.

    Returns
    -------
    (vmin, vmax, scale)
        ``(0, max, "sequential")`` when no entry is negative (softmax), else
        ``(-m, m, "diverging")`` with ``m`` the largest ``|entry|`` (white = 0).
    """
    finite = matrix[np.isfinite(matrix)]
    top = float(np.abs(finite).max()) if finite.size else 1.0
    top = top or 1.0
    if finite.size and finite.min() < 0:
        return -top, top, "diverging"
    return 0.0, top, "sequential"


def _draw_patches(ax, maps) -> None:
    """The image with a white gap between its patches and each patch's token index on it."""
    img, p = maps.image, maps.patch_size
    rows, cols = maps.patch_tokens.shape
    ax.imshow(img, cmap="gray_r", vmin=0.0, vmax=max(1.0, float(img.max())), interpolation="nearest")
    for r in range(1, rows):
        ax.axhline(r * p - 0.5, color="white", lw=3)
    for c in range(1, cols):
        ax.axvline(c * p - 0.5, color="white", lw=3)
    for r in range(rows):
        for c in range(cols):
            ax.text(c * p + (p - 1) / 2, r * p + (p - 1) / 2, str(int(maps.patch_tokens[r, c])), ha="center",
                    va="center", fontsize=9, color="#b34d00", fontweight="bold",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"{rows * cols} patch tokens\n({p}×{p} pixels each)", fontsize=10)


def _draw_matrix(fig, ax, label: str, matrix: np.ndarray, norm: float, sums: np.ndarray) -> None:
    from matplotlib.colors import Normalize

    lo, hi, scale = matrix_limits(matrix)
    im = ax.imshow(matrix, cmap=cmap(scale), norm=Normalize(lo, hi), interpolation="nearest")
    n = matrix.shape[0]
    ticks = list(range(0, n, 1 if n <= 20 else max(1, n // 8)))
    ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=7)
    ax.set_yticks(ticks, [str(t) for t in ticks], fontsize=7)
    ax.set_xlabel("key token")
    ax.set_ylabel("query token")
    rows = (f"every row sums to {format_value(float(sums.mean()), 3)}" if np.allclose(sums, sums[0], rtol=1e-6)
            else f"row sums {format_value(float(sums.min()), 3)} to {format_value(float(sums.max()), 3)}")
    ax.set_title(f"{label}\n‖A‖_F = {format_value(norm, 3)}\n{rows}", fontsize=10)
    bar = fig.colorbar(im, ax=ax, shrink=0.8)
    bar.set_label("attention weight" + (" (white = 0)" if scale == "diverging" else ""), fontsize=8)
    bar.ax.tick_params(labelsize=7)


def draw_attention_maps(maps, *, fig=None):
    """Draw :class:`~toolkit.lab.attention_maps.AttentionMaps`: the patches, then one matrix per activation.

    Parameters
    ----------
    maps : AttentionMaps
    fig : matplotlib.figure.Figure, optional
        An empty figure to draw on (not closed); default a new pyplot figure.

    Returns
    -------
    matplotlib.figure.Figure
        1 + len(maps.matrices) panels in a row, titled with the layer and head.
    """
    n = len(maps.matrices)
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(2.6 + 4.0 * n, 4.3), layout="constrained")
    axes = fig.subplots(1, n + 1, squeeze=False)[0]
    _draw_patches(axes[0], maps)
    norms, sums = maps.norms(), maps.row_sums()
    for ax, (label, matrix) in zip(axes[1:], maps.matrices.items(), strict=True):
        _draw_matrix(fig, ax, label, matrix, norms[label], sums[label])
    how = ("one model's scores S under each activation" if maps.shared_scores
           else "each activation's own model")
    fig.suptitle(f"layer {maps.layer}, head {maps.head}: attention matrix A = φ(S), {how}\n({TOKEN_NOTE})",
                 fontsize=10)
    return fig
