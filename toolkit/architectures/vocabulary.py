"""The canonical component vocabulary shared by every part of the toolkit."""

from __future__ import annotations

#: Canonical components, in display order. Every Dataset has exactly these
#: columns; an architecture that lacks one fills it with NaN.
COMPONENTS: tuple[str, ...] = (
    "attn.q",
    "attn.k",
    "attn.v",
    "attn.o",
    "mlp.up",
    "mlp.down",
    "mlp.gate",
)

#: Components some architectures add after the canonical seven, in display
#: order: latent attention's down-projections (DeepSeek MLA ``q_a_proj``,
#: ``kv_a_proj_with_mqa``), the mixture-of-experts router and the shared
#: experts. A Dataset has these columns only when the model has the matrix.
EXTRA_COMPONENTS: tuple[str, ...] = (
    "attn.q_a",
    "attn.kv_a",
    "mlp.router",
    "mlp.shared.up",
    "mlp.shared.down",
    "mlp.shared.gate",
)

#: Every component an adapter may hand out, canonical ones first.
ALL_COMPONENTS: tuple[str, ...] = COMPONENTS + EXTRA_COMPONENTS

