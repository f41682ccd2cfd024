"""Names, units, formulas and references of the activation statistics.

One :class:`Stat` per Dataset variable; its :meth:`Stat.attrs` are the
variable's attrs, with the same four keys the weight metrics carry
(``long_name``, ``units``, ``description``, ``reference``). These records are
not in the weight-metric registry: they are measured by hooks during a forward
pass, not computed from a matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

SUN = "Sun, Chen, Kolter, Liu (2024), Massive Activations in Large Language Models, COLM 2024, arXiv:2402.17762"
BONDARENKO = ("Bondarenko, Nagel, Blankevoort (2023), Quantizable Transformers: Removing Outliers by "
              "Helping Attention Heads Do Nothing, NeurIPS 2023, arXiv:2306.12929 (kurtosis of activations)")
SARATCHANDRAN = ("Saratchandran, Zheng, Ji, Zhang, Lucey (2024), Rethinking Softmax: Self-Attention with "
                 "Polynomial Activations, arXiv:2410.18613 (||softmax(A)||_F <= sqrt(N))")
XIAO = ("Xiao, Tian, Chen, Han, Lewis (2024), Efficient Streaming Language Models with Attention Sinks, "
        "ICLR 2024, arXiv:2309.17453")
SHANNON = ("Shannon entropy in nats of each attention row, e.g. Zhai et al. (2023), Stabilizing Transformer "
           "Training by Preventing Attention Entropy Collapse, ICML 2023")
CONVENTION = "root mean square, the usual activation scale (e.g. RMSNorm: Zhang & Sennrich 2019)"
GRAD = "gradient of the causal language-modelling loss (cross-entropy of the next token), as in training"

PAD = " Padding tokens are excluded."
POOL = (" Pooled over every entry x (token x feature) of the component's output over all non-padding "
        "tokens of all texts; the component's columns of a fused module only.")
QUERY0 = (" Query rows are the text's non-padding tokens; in a decoder (causal attention) the first "
          "query, which can attend only to itself, is left out.")


@dataclass(frozen=True)
class Stat:
    """Metadata of one activation statistic (a Dataset variable)."""

    name: str
    long_name: str
    units: str
    description: str
    reference: str

    def attrs(self) -> dict[str, str]:
        """NetCDF-safe attrs for the Dataset variable holding this statistic."""
        return {"long_name": self.long_name, "units": self.units,
                "description": self.description, "reference": self.reference}


def _s(name, long_name, units, description, reference) -> Stat:
    return Stat(name, long_name, units, description, reference)


#: Statistics over dims (layer, component).
GRID_STATS: tuple[Stat, ...] = (
    _s("output_rms", "output RMS", "1",
       "sqrt(mean(x^2)) of the component's output (the projection's output features, before any "
       "activation function or rotary embedding)." + POOL, CONVENTION),
    _s("input_rms", "input RMS", "1",
       "sqrt(mean(x^2)) of the module's input (the same normed hidden state for q, k and v; the "
       "concatenated head outputs for attn.o; the activated hidden units for mlp.down)." + PAD, CONVENTION),
    _s("activation_kurtosis", "activation excess kurtosis", "1",
       "Excess (Fisher) kurtosis m4 / m2^2 - 3 of the component's output, m_k = mean((x - mean(x))^k); 0 "
       "for a Gaussian, large when a few outlier features dominate (the definition of the weight metric "
       "kurtosis, scipy.stats.kurtosis's default)." + POOL, BONDARENKO),
    _s("max_abs_activation", "max |activation|", "1",
       "max |x| over the component's output (massive activations are values ~10^3-10^4 times the median "
       "magnitude)." + POOL, SUN),
    _s("gradient_norm", "gradient Frobenius norm", "1",
       "||dL/dW||_F, L = mean over every non-padding next-token prediction of all texts of "
       "-log p(x_{t+1} | x_<=t) (nats), W the component's (out, in) weight (its rows of a fused weight). "
       "NaN for encoder models (no next-token loss).", GRAD),
)

#: Attention statistics over dims (layer, head): the mean over texts.
ATTENTION_STATS: tuple[Stat, ...] = (
    _s("attention_frobenius_norm", "attention Frobenius norm", "1",
       "||A||_F = sqrt(sum_ij A_ij^2) of the head's N x N post-softmax attention matrix of one text "
       "(N non-padding tokens); at most sqrt(N) for softmax rows. Mean over texts.", SARATCHANDRAN),
    _s("attention_entropy", "attention entropy", "nat",
       "-sum_j A_ij log A_ij, averaged over query rows i, then over texts." + QUERY0, SHANNON),
    _s("attention_sink_mass", "attention sink mass", "1",
       "A_i0, the share of attention on the text's first token, averaged over query rows i, then over "
       "texts." + QUERY0, XIAO),
)

#: Per-head output RMS of the q, k, v projections.
HEAD_STATS: tuple[Stat, ...] = (
    _s("query_head_rms", "query RMS per head", "1",
       "sqrt(mean(q^2)) over the head's head_dim features of the query projection's output, all "
       "non-padding tokens (before rotary embeddings; a rotation keeps it). Dims (layer, head).", CONVENTION),
    _s("key_head_rms", "key RMS per key/value head", "1",
       "sqrt(mean(k^2)) over the key/value head's head_dim features of the key projection's output. "
       "Dims (layer, kv_head): with grouped-query attention kv_head h serves the query heads whose "
       "kv_group is h.", CONVENTION),
    _s("value_head_rms", "value RMS per key/value head", "1",
       "sqrt(mean(v^2)) over the key/value head's head_dim features of the value projection's output. "
       "Dims (layer, kv_head).", CONVENTION),
)

STATS: dict[str, Stat] = {s.name: s for s in (*GRID_STATS, *ATTENTION_STATS, *HEAD_STATS)}


def spread_attrs(stat: Stat) -> dict[str, str]:
    """Attrs of ``<name>_std``: the standard deviation over texts of an attention statistic."""
    return {"long_name": f"{stat.long_name} (std over texts)", "units": stat.units,
            "description": f"Population standard deviation over texts of the per-text value. {stat.description}",
            "reference": stat.reference}


def per_text_attrs(stat: Stat) -> dict[str, str]:
    """Attrs of ``<name>_per_text``: the per-text values of an attention statistic."""
    return {"long_name": f"{stat.long_name} (per text)", "units": stat.units,
            "description": f"Value for each text (dim text). {stat.description}",
            "reference": stat.reference}
