"""Notebook 05's experiment: perplexity of a model magnitude-pruned with uniform, alpha and reverse-alpha
allocations at several global sparsities, and a reading of the result written from its numbers.

One function runs it (:func:`pruning_sweep`, used by the notebook and by ``benchmarks/bench_alpha_pruning.py``
through the notebook), one writes what it shows (:func:`reading`), so the README's conclusion comes from the
committed numbers and says what they say, whichever way they fall.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from toolkit.analysis.allocation import DEFAULT_EPSILON, alpha_allocation
from toolkit.analysis.held_out import perplexity
from toolkit.analysis.pruning import pruned

__all__ = ["ALLOCATIONS", "allocation_for", "pruning_sweep", "reading"]

#: The allocations compared: the same global budget everywhere, alpha's AlphaPruning allocation, and its mirror.
ALLOCATIONS = ("uniform", "alpha", "reverse alpha")


def allocation_for(ds, name: str, sparsity: float, *, epsilon: float = DEFAULT_EPSILON):
    """The (layer, component) sparsity named ``name`` (one of :data:`ALLOCATIONS`) for the budget ``sparsity``.

    ``"uniform"`` is :func:`~toolkit.analysis.alpha_allocation` with ε = 0 (every matrix ``sparsity``, the
    same cells left out), so the three differ only in the mapping.
    """
    if name not in ALLOCATIONS:
        raise ValueError(f"unknown allocation {name!r}; one of {ALLOCATIONS}")
    return alpha_allocation(ds, sparsity, epsilon=0.0 if name == "uniform" else epsilon,
                            reverse=name == "reverse alpha")


def pruning_sweep(loaded, ds, text: str, sparsities: Sequence[float], *, epsilon: float = DEFAULT_EPSILON,
                  max_tokens: int | None = None, window: int = 256,
                  progress: Callable[[str], None] | None = None) -> dict:
    """Perplexity of ``loaded`` on ``text`` dense, then pruned with each allocation at each sparsity.

    Parameters
    ----------
    loaded : toolkit.activations.Loaded
        The model and tokenizer; its weights are restored after each pruned run.
    ds : xarray.Dataset
        ``alpha`` (layer, component) of the same model (:func:`toolkit.weight_stats`).
    text : str
        Held-out text (:func:`toolkit.analysis.held_out.load_held_out`).
    sparsities : sequence of float
        Global budgets in [0, 1).
    epsilon, max_tokens, window
        As in :func:`~toolkit.analysis.alpha_allocation` and :func:`~toolkit.analysis.perplexity`.
    progress : callable, optional
        ``progress(line)`` after each run.

    Returns
    -------
    dict
        ``dense_perplexity``; ``tokens`` (tokens evaluated); ``rows``: one dict per (sparsity, allocation) with
        ``sparsity``, ``allocation``, ``perplexity``, ``zeroed_share`` (zeros written / weights of the
        allocated matrices, the budget met) and ``layer_sparsity`` (the size-weighted sparsity of each layer);
        ``settings`` (epsilon, window, max_tokens, sparsities, allocations, granularity).
    """
    say = progress or (lambda line: None)
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = len(ids) if max_tokens is None else min(len(ids), max_tokens)
    dense = perplexity(loaded, text, max_tokens=max_tokens, window=window)
    say(f"dense: perplexity {dense:.2f} on {tokens} tokens")
    rows = []
    for sparsity in sparsities:
        for name in ALLOCATIONS:
            share = allocation_for(ds, name, sparsity, epsilon=epsilon)
            size = share.n_rows * share.n_cols
            with pruned(loaded.model, share) as zeroed:
                ppl = perplexity(loaded, text, max_tokens=max_tokens, window=window)
            total = float(size.where(share.notnull()).sum())
            layer = (share * size).sum("component") / size.where(share.notnull()).sum("component")
            rows.append({"sparsity": float(sparsity), "allocation": name, "perplexity": ppl,
                         "zeroed_share": sum(zeroed.values()) / total,
                         "layer_sparsity": [round(float(x), 4) for x in layer.values]})
            say(f"{sparsity:.0%} {name}: perplexity {ppl:.2f}")
    return {"dense_perplexity": dense, "tokens": tokens, "rows": rows,
            "settings": {"epsilon": epsilon, "window": window, "max_tokens": max_tokens,
                         "sparsities": [float(s) for s in sparsities], "allocations": list(ALLOCATIONS),
                         "granularity": "layer", "threads": torch.get_num_threads()}}


def reading(result: dict, model: str = "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized to float32)") -> str:
    """A Markdown paragraph saying what ``result`` (of :func:`pruning_sweep`) shows, from its numbers.

    For each sparsity: the perplexity of each allocation against uniform's (a ratio; below 1 is better), and
    whether the order AlphaPruning predicts (alpha <= uniform <= reverse) holds; then what the result does not
    show (one small model, one text, magnitude pruning without any update of the remaining weights).
    """
    by = {(r["sparsity"], r["allocation"]): r["perplexity"] for r in result["rows"]}
    sparsities = result["settings"]["sparsities"]
    lines, held = [], []
    for s in sparsities:
        u, a, rv = by[s, "uniform"], by[s, "alpha"], by[s, "reverse alpha"]
        order = sorted(ALLOCATIONS, key=lambda n: by[s, n])
        ok = a <= u <= rv
        held.append(ok)
        lines.append(f"- At {s:.0%} sparsity: uniform {u:.1f}, alpha-allocated {a:.1f} ({_ratio(a, u)} of uniform), "
                     f"reverse {rv:.1f} ({_ratio(rv, u)}); best to worst: {', '.join(order)}. "
                     + ("The predicted order holds." if ok else "The predicted order does not hold."))
    dense = result["dense_perplexity"]
    if all(held):
        verdict = ("On this model and text the allocation AlphaPruning predicts (prune heavy-tailed layers, small "
                   "alpha, less) beat uniform pruning and its mirror beat neither, at every sparsity tried.")
    elif not any(held):
        verdict = ("On this model and text the order AlphaPruning predicts (alpha-allocated better than uniform, "
                   "reverse worse) held at none of the sparsities tried.")
    else:
        verdict = ("On this model and text the order AlphaPruning predicts held at "
                   + ", ".join(f"{s:.0%}" for s, h in zip(sparsities, held, strict=True) if h)
                   + " but not at " + ", ".join(f"{s:.0%}" for s, h in zip(sparsities, held, strict=True) if not h)
                   + ".")
    worst = max(by.values())
    caveat = (f"Read it with its limits: one {model}, dense perplexity {dense:.1f} on {result['tokens']} tokens of "
              f"one held-out text; plain magnitude pruning, no update of the remaining weights (the paper's LLaMA-7B "
              "figures use Wanda and SparseGPT as well); ε = "
              f"{result['settings']['epsilon']:g}, within the authors' LLaMA-7B values (0.2 to 0.3), not tuned "
              "here. "
              + (f"Perplexities up to {worst:.0f} mean the pruned model no longer writes usable text at these "
                 "sparsities, whichever allocation: a 135M model quantized to 4 bits has little redundancy to "
                 "spare, unlike the 7B models of the paper. " if worst > 10 * dense else "")
              + "One run is no proof either way; it is a lesson in testing a claim on the model at hand.")
    return verdict + "\n\n" + "\n".join(lines) + "\n\n" + caveat


def _ratio(x: float, ref: float) -> str:
    return f"{x / ref:.2f}x" if math.isfinite(x) and ref > 0 else "n/a"
