"""GPT-2: ``Conv1D`` weights stored (in, out) and a fused ``c_attn``.

From ``transformers`` 5 ``modeling_gpt2.py`` and ``pytorch_utils.Conv1D``
(``forward``: ``x @ weight + bias``, weight shape (nx, nf) = (in, out)):
``transformer.h.{i}.attn.c_attn`` has ``3 * n_embd`` outputs and
``GPT2Attention.forward`` splits them ``c_attn(x).split(n_embd, dim=2)`` into
q, k, v (contiguous); ``attn.c_proj`` is the output projection;
``mlp.c_fc`` (up, ``n_inner`` or ``4 * n_embd`` outputs) and ``mlp.c_proj``
(down). Every one is transposed to (out, in) first. Cross-attention blocks
(``crossattention.c_attn``, ``attn.q_attn``) are not components. The config
keys are ``n_layer``, ``n_embd``, ``n_head``, ``n_inner``.
"""

from __future__ import annotations

from toolkit.architectures.adapter import FamilyAdapter, register_architecture
from toolkit.architectures.split import Split


@register_architecture("gpt2")
class GPT2Adapter(FamilyAdapter):
    """GPT-2 and its fine-tunes (DistilGPT2...)."""

    prefixes = ("transformer.", "")
    layers = "h"
    modules = {
        "attn.c_attn": Split(("attn.q", "attn.k", "attn.v"), lambda d: (d.hidden_size,) * 3),
        "attn.c_proj": "attn.o",
        "mlp.c_fc": "mlp.up",
        "mlp.c_proj": "mlp.down",
    }
    transposed = frozenset(modules)
