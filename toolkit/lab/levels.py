"""Where the activations start: attention norms and score scale of an untrained ViT.

Every activation of a lab run starts from the same weights (one seed), so at epoch 0
all five see the same scores ``S``, and their norms are fixed by the scale of ``S``
and by N alone. For near-Gaussian scores of standard deviation σ, ``‖S‖_F ≈ N σ``
and ``‖S∘S∘S‖_F ≈ √15 N σ³`` (E S⁶ = 15 σ⁶), while softmax starts near 1: the cube
lands below softmax only when σ < (√15 N)^(-1/3), 0.25 at N = 17, 0.16 at N = 65,
0.11 at N = 197. :func:`initial_levels` measures it for any model size and
initialisation, without training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from toolkit.lab.attention import SCORE_STATISTICS, parse_activation
from toolkit.lab.data import load_digits_split
from toolkit.lab.vit import ViT


def initial_levels(activations: Sequence[str] = ("softmax", "x/1", "x/16", "x³/1", "x³/16"), *,
                   image_size: int = 8, patch_size: int = 2, dim: int = 32, heads: int = 4, depth: int = 12,
                   init_std: float | None = None, images: int = 64, seed: int = 0):
    """Attention norm and score scale per activation of an untrained ViT on held-out digits.

    Parameters
    ----------
    activations : sequence of str
        Default the paper's five.
    image_size, patch_size, dim, heads, depth : int
        The model (as in :class:`toolkit.lab.ViT`); ``image_size`` a multiple of 8
        (the digits are upsampled to it). N = (image_size / patch_size)² + 1.
    init_std : float, optional
        None: PyTorch's initialisation (the lab's); 0.02: timm's ViT (the paper's).
    images : int
        Held-out images averaged over (the first ones of the fixed test split).
    seed : int
        Seeds the weights, the same for every activation.

    Returns
    -------
    pandas.DataFrame
        Index activation; columns ``N``, ``attention_norm`` (mean over layers,
        heads and images) and the means over layers of
        :data:`~toolkit.lab.attention.SCORE_STATISTICS`.

    Examples
    --------
    >>> initial_levels(image_size=56, patch_size=4, dim=192, heads=3, init_std=0.02)  # doctest: +SKIP
    """
    import pandas as pd

    x = load_digits_split(image_size=image_size).x_test[:images]
    rows = {}
    for spec in activations:
        act = parse_activation(spec)
        torch.manual_seed(seed)
        model = ViT(act, image_size=image_size, patch_size=patch_size, dim=dim, depth=depth, heads=heads,
                    init_std=init_std).eval()
        norms, stats = model.attention_statistics(x)
        by_layer = torch.tensor(stats, dtype=torch.float64).mean(0).tolist()
        rows[act.label] = [model.num_tokens, float(norms.mean()), *by_layer]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=["N", "attention_norm", *SCORE_STATISTICS])
    table.index.name = "activation"
    return table


def cube_threshold(n_tokens: int) -> float:
    """σ below which ``‖S∘S∘S‖_F`` of Gaussian scores falls under 1 (softmax's start): (√15 N)^(-1/3)."""
    return (math.sqrt(15) * n_tokens) ** (-1 / 3)
