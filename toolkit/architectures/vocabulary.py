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

#: Axis labels as the figures print them (``attn. q`` ...).
COMPONENT_LABELS: dict[str, str] = {c: c.replace(".", ". ") for c in COMPONENTS}
