"""One image's attention matrices under several activations, and the image as its patch tokens.

What the lesson of notebook 04 shows before any norm: the ViT cuts an 8 × 8 digit into 16 patches
of 2 × 2 pixels (tokens 1-16, row by row; token 0 is the class token), and one layer's head turns the
scaled scores ``S = Q Kᵀ / √d_head`` of those 17 tokens into a 17 × 17 attention matrix ``φ(S)``.
:func:`attention_maps` computes the numbers (no matplotlib); :func:`attention_picture` draws them
(:func:`toolkit.plot.attention_maps_figure.draw_attention_maps`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from toolkit.errors import InvalidOptionError
from toolkit.lab.attention import parse_activation

#: The activations of the picture: softmax next to the unscaled line and the scaled cube.
PICTURE_ACTIVATIONS = ("softmax", "x/1", "x³/16")


@dataclass(frozen=True)
class AttentionMaps:
    """One image's attention matrices for one layer and head, and its patches.

    Attributes
    ----------
    image : numpy.ndarray, shape (H, W)
        The grey image, as the model saw it.
    patch_size : int
        Side of a patch in pixels.
    patch_tokens : numpy.ndarray, shape (H / patch_size, W / patch_size), int
        Token index of each patch: ``1 + row * columns + column`` (token 0 is the class token).
    matrices : dict of str -> numpy.ndarray, shape (N, N)
        Activation label -> ``φ(S)``, rows = queries, columns = keys, float64.
    scores : dict of str -> numpy.ndarray, shape (N, N)
        Activation label -> the scores ``S = Q Kᵀ / √d_head`` the matrix was made from (one array,
        the same for every label, when one model gave them all).
    layer, head : int
        0-based.
    shared_scores : bool
        One model's scores under every activation (True), or each activation's own model (False).
    """

    image: np.ndarray
    patch_size: int
    patch_tokens: np.ndarray
    matrices: dict
    scores: dict
    layer: int
    head: int
    shared_scores: bool

    @property
    def num_tokens(self) -> int:
        """N: the patches plus the class token."""
        return int(self.patch_tokens.size) + 1

    def norms(self) -> dict:
        """Activation label -> the Frobenius norm ``‖φ(S)‖_F`` of its matrix (what the lab's curves plot)."""
        return {k: float(np.sqrt((m ** 2).sum())) for k, m in self.matrices.items()}

    def row_sums(self) -> dict:
        """Activation label -> each row's sum, shape (N,) (1 for softmax, anything for a polynomial)."""
        return {k: m.sum(axis=1) for k, m in self.matrices.items()}


def _image_tensor(image) -> torch.Tensor:
    """(H, W), (1, H, W) or (1, 1, H, W) -> (1, 1, H, W) float32."""
    x = torch.as_tensor(np.asarray(image), dtype=torch.float32)
    while x.dim() < 4:
        x = x.unsqueeze(0)
    if x.dim() != 4 or x.shape[0] != 1:
        raise InvalidOptionError("image", tuple(x.shape), "one image: (H, W), (1, H, W) or (1, 1, H, W)",
                                 "attention_maps")
    return x


@torch.no_grad()
def layer_scores(model, image: torch.Tensor, layer: int) -> torch.Tensor:
    """The scaled scores of every head of one layer for one image, shape (head, N, N).

    Parameters
    ----------
    model : toolkit.lab.ViT
    image : torch.Tensor, shape (1, in_chans, H, W)
    layer : int
        0-based block index.

    Returns
    -------
    torch.Tensor, shape (head, N, N)
        ``Q Kᵀ / √d_head`` as the block computed it in a forward pass (before its activation).
    """
    attn = model.blocks[layer].attn
    was_training = model.training
    model.eval()
    attn.record = True
    try:
        model(image)
        return attn.last_scores[0].double()
    finally:
        attn.record, attn.last_attention, attn.last_scores = False, None, None
        model.train(was_training)


def attention_maps(model, image, *, layer: int = 0, head: int = 0,
                   activations: Sequence[str] = PICTURE_ACTIVATIONS) -> AttentionMaps:
    """One image's attention matrix at ``layer`` and ``head`` under each activation.

    Parameters
    ----------
    model : toolkit.lab.ViT or mapping of str -> toolkit.lab.ViT
        One model: its scores ``S`` at that layer and head, with each activation applied to
        them (the same scores, three ways of turning them into attention). A mapping (activation
        label -> a model trained with that activation): each model's own scores and activation.
    image : array-like, shape (H, W), (1, H, W) or (1, 1, H, W)
        One grey image, scaled as the lab's (:func:`toolkit.lab.data.load_digits_split`).
    layer, head : int
        0-based; default the first layer's first head.
    activations : sequence of str
        Default :data:`PICTURE_ACTIVATIONS` (softmax, x/1, x³/16); ignored for a mapping.

    Returns
    -------
    AttentionMaps

    Raises
    ------
    InvalidOptionError
        ``layer`` or ``head`` outside the model, or not one image.
    UnknownActivationError
        An activation that cannot be read.

    Notes
    -----
    ``φ(S)`` is the model's own :class:`~toolkit.lab.attention.AttentionActivation`:
    softmax over each row, or ``S^p / c`` elementwise.

    Examples
    --------
    >>> from toolkit.lab import ViT
    >>> maps = attention_maps(ViT(), np.zeros((8, 8)), layer=3)
    >>> maps.matrices["softmax"].shape, sorted(maps.matrices)
    ((17, 17), ['softmax', 'x/1', 'x³/16'])
    """
    models = dict(model) if isinstance(model, Mapping) else None
    one = next(iter(models.values())) if models else model
    x = _image_tensor(image)
    depth, heads = len(one.blocks), one.blocks[0].attn.heads
    if not (isinstance(layer, int) and 0 <= layer < depth):
        raise InvalidOptionError("layer", layer, f"a layer of the model, 0..{depth - 1}", "attention_maps")
    if not (isinstance(head, int) and 0 <= head < heads):
        raise InvalidOptionError("head", head, f"a head of the model, 0..{heads - 1}", "attention_maps")
    if models:
        pairs = {parse_activation(k).label: (m.blocks[layer].attn.activation, m) for k, m in models.items()}
        scores = {k: layer_scores(m, x, layer)[head] for k, (_, m) in pairs.items()}
        acts = {k: a for k, (a, _) in pairs.items()}
    else:
        shared = layer_scores(model, x, layer)[head]
        acts = {a.label: a for a in map(parse_activation, activations)}
        scores = {k: shared for k in acts}
    patch = int(one.patch_embed.kernel_size[0])
    side_h, side_w = x.shape[-2] // patch, x.shape[-1] // patch
    return AttentionMaps(
        image=x[0, 0].numpy().astype(float), patch_size=patch,
        patch_tokens=1 + np.arange(side_h * side_w).reshape(side_h, side_w),
        matrices={k: acts[k](s).numpy() for k, s in scores.items()},
        scores={k: s.numpy() for k, s in scores.items()}, layer=layer, head=head, shared_scores=models is None)


def attention_picture(model, image, *, layer: int = 0, head: int = 0,
                      activations: Sequence[str] = PICTURE_ACTIVATIONS, fig=None):
    """Draw one image as its patch tokens next to its attention matrix under each activation.

    Parameters
    ----------
    model, image, layer, head, activations
        As :func:`attention_maps`.
    fig : matplotlib.figure.Figure, optional
        An empty figure to draw on; default a new pyplot figure.

    Returns
    -------
    matplotlib.figure.Figure
        The image cut into its patches (each labelled with its token index), then one
        N × N matrix per activation (rows: queries, columns: keys), each with its colour bar,
        row sums and Frobenius norm.

    Examples
    --------
    >>> fig = attention_picture(ViT(), digits.x_test[0], layer=5, head=1)  # doctest: +SKIP
    """
    from toolkit.plot.attention_maps_figure import draw_attention_maps

    return draw_attention_maps(attention_maps(model, image, layer=layer, head=head, activations=activations),
                               fig=fig)
