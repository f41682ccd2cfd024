"""A small Vision Transformer whose attention activation is pluggable.

Patch embedding (a strided convolution), a class token, learned position
embeddings, ``depth`` pre-norm blocks ``x + Attn(LN(x))``, ``x + MLP(LN(x))``,
a final LayerNorm and a linear head on the class token (Dosovitskiy et al.,
"An Image is Worth 16x16 Words", ICLR 2021).
"""

from __future__ import annotations

import torch
from torch import nn

from toolkit.lab.attention import Attention, AttentionActivation, frobenius_norm, score_statistics


class Block(nn.Module):
    """Pre-norm transformer block. Input and output: shape (batch, N, dim)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int, activation):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, activation)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Vision Transformer for small grey images.

    Parameters
    ----------
    activation : str or AttentionActivation
        Attention activation of every layer (see
        :func:`toolkit.lab.attention.parse_activation`).
    image_size, patch_size : int
        Square image and patch sides in pixels. ``N = (image_size /
        patch_size)² + 1`` tokens (the +1 is the class token). Defaults 8, 2
        give N = 17.
    dim, depth, heads, mlp_ratio : int
        Embedding width, number of layers, heads per layer, MLP expansion.
    in_chans, num_classes : int
        Image channels and classes.
    init_std : float, optional
        Draw every ``nn.Linear`` weight from a normal truncated at ±2 std with
        this standard deviation and zero its bias, as timm's ViT (and so the
        paper's) does with 0.02. Default None: PyTorch's own initialisation
        (uniform, ±1/√fan_in), which the lab trains with; it gives scores
        about 4x larger at initialisation (see :func:`toolkit.lab.initial_levels`).

    Examples
    --------
    >>> model = ViT("x^3/16", dim=16, depth=12, heads=2)
    >>> model(torch.zeros(4, 1, 8, 8)).shape
    torch.Size([4, 10])
    """

    def __init__(self, activation: str | AttentionActivation = "softmax", *, image_size: int = 8,
                 patch_size: int = 2, dim: int = 32, depth: int = 12, heads: int = 4,
                 mlp_ratio: int = 2, in_chans: int = 1, num_classes: int = 10,
                 init_std: float | None = None):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not divisible by patch_size {patch_size}")
        self.num_tokens = (image_size // patch_size) ** 2 + 1
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_tokens, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, activation) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        if init_std is not None:
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=init_std, a=-2 * init_std, b=2 * init_std)
                    nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits. ``images``: (batch, in_chans, H, W) -> (batch, num_classes)."""
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))

    @torch.no_grad()
    def attention_norms(self, images: torch.Tensor) -> torch.Tensor:
        """Frobenius norm of every post-activation attention matrix.

        Parameters
        ----------
        images : torch.Tensor, shape (batch, in_chans, H, W)

        Returns
        -------
        torch.Tensor, shape (layer, head, batch), float64
            ``‖φ(Q Kᵀ/√d_head)‖_F`` per layer, head and image.
        """
        return self.attention_statistics(images, scores=False)[0]

    @torch.no_grad()
    def attention_statistics(self, images: torch.Tensor, *, scores: bool = True):
        """Attention norms and, per layer, the scale of the scores, from one forward pass.

        Parameters
        ----------
        images : torch.Tensor, shape (batch, in_chans, H, W)
        scores : bool
            Also summarise the scaled scores of each layer
            (:func:`toolkit.lab.attention.score_statistics`). Default True.

        Returns
        -------
        norms : torch.Tensor, shape (layer, head, batch), float64
            ``‖φ(Q Kᵀ/√d_head)‖_F`` per layer, head and image.
        stats : list of (float, float, float)
            Per layer, ``mean |S|``, ``p99 |S|`` and the share of ``|S| > 1``
            over the batch, the heads and every entry; empty when ``scores``
            is False.
        """
        attns = [b.attn for b in self.blocks]
        norms, stats = [], []
        for a in attns:
            a.record = True
        try:
            self(images)
            for a in attns:
                norms.append(frobenius_norm(a.last_attention).T)
                if scores:
                    stats.append(score_statistics(a.last_scores))
                a.last_attention = a.last_scores = None  # free each layer's matrices as soon as summarised
            return torch.stack(norms), stats
        finally:
            for a in attns:
                a.record, a.last_attention, a.last_scores = False, None, None
