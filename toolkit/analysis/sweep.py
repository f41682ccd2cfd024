"""Notebook 05's experiment: a grid of AlphaPruning allocations against uniform pruning, judged by perplexity with
its bootstrap uncertainty over held-out windows, and a reading written from the grid.

The grid (:func:`pruning_grid`) crosses the global sparsity, AlphaPruning's ε, the metric the layers are ranked
by (the default ``alpha``, or ``alpha_peak``: the ``xmin_peak`` fit the paper's released scripts read) and the
pruner (magnitude, or Wanda: :mod:`toolkit.analysis.wanda`); each pruned model's perplexity on the held-out text
is compared with uniform pruning's at the same sparsity and pruner, window by window (a paired bootstrap over the
held-out windows, :func:`paired_ratio`). :func:`reading` counts the settings where the alpha allocation wins or
loses beyond that noise, and by how much, and says nothing the grid does not show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from toolkit.analysis.allocation import DEFAULT_EPSILON, alpha_allocation
from toolkit.analysis.held_out import window_losses
from toolkit.analysis.pruning import pruned
from toolkit.errors import InvalidOptionError

__all__ = ["ALLOCATIONS", "EPSILONS", "allocation_for", "paired_ratio", "pruning_grid", "reading"]

#: The allocations: the same global budget everywhere, alpha's AlphaPruning allocation, and its mirror.
ALLOCATIONS = ("uniform", "alpha", "reverse alpha")
#: ε values tried: the range the AlphaPruning / FARMS authors tune over for LLaMA pruning (their scripts'
#: ``epsilon`` column, ``LLM_Pruning/scripts/llm_pruning_main.txt`` of github.com/HUST-AI-HYZ/FARMS, from 0.1 up).
EPSILONS = (0.1, 0.2, 0.3)
#: Bootstrap replicates over the held-out windows, and the level of the intervals.
REPLICATES, LEVEL = 2000, 0.95
#: How far from 1 a perplexity ratio's whole interval must lie to count as a win or a loss: the bootstrap
#: resamples the windows of one held-out text, not other texts, so a tight 0.99x says nothing of another text.
MARGIN = 0.02


def allocation_for(ds, name: str, sparsity: float, *, epsilon: float = DEFAULT_EPSILON):
    """The (layer, component) sparsity named ``name`` (one of :data:`ALLOCATIONS`) for the budget ``sparsity``.

    ``"uniform"`` is :func:`~toolkit.analysis.alpha_allocation` with ε = 0 (every matrix ``sparsity``, the
    same cells left out), so the three differ only in the mapping.
    """
    if name not in ALLOCATIONS:
        raise ValueError(f"unknown allocation {name!r}; one of {ALLOCATIONS}")
    return alpha_allocation(ds, sparsity, epsilon=0.0 if name == "uniform" else epsilon,
                            reverse=name == "reverse alpha")


def paired_ratio(losses, base_losses, counts, *, replicates: int = REPLICATES, level: float = LEVEL,
                 seed: int = 0) -> dict:
    """Perplexity of ``losses`` over that of ``base_losses`` on the same windows, with a paired bootstrap interval.

    Parameters
    ----------
    losses, base_losses : sequence of float
        Next-token loss sums (nats) per held-out window (:func:`toolkit.analysis.held_out.window_losses`).
    counts : sequence of int
        Predicted tokens per window (the same windows for both).
    replicates, level, seed
        Windows are resampled with replacement ``replicates`` times (``numpy.random.default_rng(seed)``); the
        interval is the percentile interval at ``level`` (Efron & Tibshirani 1993, ch. 13).

    Returns
    -------
    dict
        ``ratio``, ``lo``, ``hi`` (of the ratio) and ``ppl``, ``ppl_lo``, ``ppl_hi`` (of ``losses``' perplexity).
    """
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (losses, base_losses, counts))
    idx = np.random.default_rng(seed).integers(0, c.size, (int(replicates), c.size))
    sa, sb, sc = a[idx].sum(1), b[idx].sum(1), c[idx].sum(1)
    q = [(1 - level) / 2, (1 + level) / 2]
    r_lo, r_hi = np.quantile(np.exp((sa - sb) / sc), q)
    p_lo, p_hi = np.quantile(np.exp(sa / sc), q)
    return {"ratio": math.exp((a.sum() - b.sum()) / c.sum()), "lo": float(r_lo), "hi": float(r_hi),
            "ppl": math.exp(a.sum() / c.sum()), "ppl_lo": float(p_lo), "ppl_hi": float(p_hi)}


def pruning_grid(loaded, datasets: dict, text: str, sparsities: Sequence[float], *,
                 epsilons: Sequence[float] = EPSILONS, norms: dict | None = None, max_tokens: int | None = None,
                 window: int = 128, progress: Callable[[str], None] | None = None) -> dict:
    """Perplexity of ``loaded`` dense, pruned uniformly, and pruned with each alpha allocation of the grid.

    Parameters
    ----------
    loaded : toolkit.activations.Loaded
        The model and tokenizer; its weights are restored after each pruned run.
    datasets : dict
        ``{metric name: Dataset}``, each with ``alpha`` (layer, component) measured by that metric's fit (e.g.
        ``{"alpha": ds, "alpha_peak": ds_peak}``).
    text : str
        Held-out text (:func:`toolkit.analysis.held_out.load_held_out`).
    sparsities : sequence of float
    epsilons : sequence of float
    norms : dict, optional
        Input-feature norms (:func:`toolkit.analysis.wanda.input_feature_norms`): Wanda runs beside magnitude.
    max_tokens, window
        As :func:`~toolkit.analysis.held_out.window_losses`.
    progress : callable, optional
        ``progress(line)`` after each run.

    Returns
    -------
    dict
        ``dense_perplexity``, ``tokens``, ``windows``; ``rows``: one per (pruner, sparsity, metric, ε) and one
        uniform row per (pruner, sparsity), with ``perplexity`` and its interval ``ppl_lo``/``ppl_hi``, and for the
        alpha rows ``ratio`` (to uniform) with ``lo``/``hi``; a setting the allocation refuses (a matrix at 100 %
        or more) has ``refused`` and no figures. ``settings``: the grid and the evaluation.
    """
    say = progress or (lambda line: None)
    first = next(iter(datasets.values()))
    dense, counts = window_losses(loaded, text, max_tokens=max_tokens, window=window)
    say(f"dense: perplexity {math.exp(sum(dense) / sum(counts)):.2f} on {sum(counts) + len(counts)} tokens")
    pruners = {"magnitude": None, **({"wanda": norms} if norms is not None else {})}
    rows = []
    for pruner, pruner_norms in pruners.items():
        for sparsity in sparsities:
            base, zeroed = _pruned_losses(loaded, allocation_for(first, "uniform", sparsity), pruner_norms, text,
                                          max_tokens, window)
            u = paired_ratio(base, base, counts)
            rows.append({"pruner": pruner, "sparsity": float(sparsity), "allocation": "uniform", "metric": None,
                         "epsilon": 0.0, "perplexity": u["ppl"], "ppl_lo": u["ppl_lo"], "ppl_hi": u["ppl_hi"],
                         "zeroed_share": zeroed})
            say(f"{pruner} {sparsity:.0%} uniform: {u['ppl']:.2f}")
            for metric, ds in datasets.items():
                for eps in epsilons:
                    row = {"pruner": pruner, "sparsity": float(sparsity), "allocation": "alpha", "metric": metric,
                           "epsilon": float(eps)}
                    try:
                        share = allocation_for(ds, "alpha", sparsity, epsilon=eps)
                    except InvalidOptionError as err:
                        rows.append({**row, "refused": str(err)})
                        continue
                    got, zeroed = _pruned_losses(loaded, share, pruner_norms, text, max_tokens, window)
                    r = paired_ratio(got, base, counts)
                    rows.append({**row, "perplexity": r["ppl"], "ppl_lo": r["ppl_lo"], "ppl_hi": r["ppl_hi"],
                                 "ratio": r["ratio"], "lo": r["lo"], "hi": r["hi"], "zeroed_share": zeroed})
                    say(f"{pruner} {sparsity:.0%} {metric} eps={eps:g}: {r['ppl']:.2f} ({r['ratio']:.2f}x uniform, "
                        f"[{r['lo']:.2f}, {r['hi']:.2f}])")
    return {"dense_perplexity": math.exp(sum(dense) / sum(counts)), "tokens": sum(counts) + len(counts),
            "windows": len(counts), "rows": rows,
            "settings": {"sparsities": [float(s) for s in sparsities], "epsilons": [float(e) for e in epsilons],
                         "metrics": list(datasets), "pruners": list(pruners), "window": window,
                         "max_tokens": max_tokens, "replicates": REPLICATES, "level": LEVEL,
                         "granularity": "layer"}}


def _pruned_losses(loaded, share, norms, text: str, max_tokens, window: int) -> tuple[list, float]:
    """The window losses of ``loaded`` pruned to ``share`` (Wanda with ``norms``), and the share of weights zeroed."""
    size = share.n_rows * share.n_cols
    with pruned(loaded.model, share, norms=norms) as zeroed:
        losses, _ = window_losses(loaded, text, max_tokens=max_tokens, window=window)
    return losses, sum(zeroed.values()) / float(size.where(share.notnull()).sum())


def reading(result: dict, model: str = "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized to float32)", *,
            margin: float = MARGIN) -> str:
    """A Markdown paragraph saying what ``result`` (of :func:`pruning_grid`) shows, from its numbers.

    A setting is a win for the alpha allocation only where the whole bootstrap interval of its perplexity ratio to
    uniform lies below ``1 - margin``, a loss only where it lies above ``1 + margin``; otherwise it is within the
    noise. The paragraph counts them, overall and per pruner and metric, gives the range of the ratios of the wins
    and losses, states the margin, and its limits.

    Parameters
    ----------
    result : dict
        What :func:`pruning_grid` returns.
    model : str
        The model's name, for the limits.
    margin : float, default :data:`MARGIN` (0.02)
        The part of a ratio that is not counted either way however tight its interval is: the interval covers
        the windows of one held-out text, not the spread between texts (0.99x is not a win).
    """
    rows = [r for r in result["rows"] if r["allocation"] == "alpha"]
    tried = [r for r in rows if "refused" not in r]
    level = result["settings"]["level"]

    def count(sel) -> str:
        win = [r for r in sel if r["hi"] < 1 - margin]
        lose = [r for r in sel if r["lo"] > 1 + margin]
        text = f"wins in {len(win)}, loses in {len(lose)}, within the noise in {len(sel) - len(win) - len(lose)}"
        if win:
            text += f"; its wins: {_span(win)} of uniform's perplexity"
        if lose:
            text += f"; its losses: {_span(lose)}"
        return text

    lines = [f"- {p}, ranked by `{m}`: " + count([r for r in tried if r["pruner"] == p and r["metric"] == m])
             + f" (of {sum(r['pruner'] == p and r['metric'] == m for r in tried)})"
             for p in result["settings"]["pruners"] for m in result["settings"]["metrics"]]
    refused = len(rows) - len(tried)
    rule = (f"a win or a loss only where the {level:.0%} paired bootstrap interval over the {result['windows']} "
            f"held-out windows lies wholly beyond {1 - margin:g}x or {1 + margin:g}x: a margin of {margin:.0%} for "
            "the noise of one held-out text, which the windows do not show")
    head = (f"Of the {len(tried)} settings of the grid (sparsity, ε, metric, pruner) the alpha allocation "
            + count(tried) + f", each against uniform pruning at the same sparsity and pruner ({rule})."
            + (f" {refused} setting(s) were refused: a matrix would get 100 % sparsity or more." if refused else ""))
    dense = result["dense_perplexity"]
    worst = max((r["perplexity"] for r in result["rows"] if "perplexity" in r), default=dense)
    caveat = (f"Read it with its limits: one {model}, dense perplexity {dense:.1f} on {result['tokens']} tokens of "
              "one held-out text, windows of "
              f"{result['settings']['window']} tokens; no update of the remaining weights; ε not tuned per setting "
              "as the paper does. "
              + (f"Perplexities up to {worst:.0f} mean the pruned model no longer writes usable text at the higher "
                 "sparsities, whichever allocation. " if worst > 10 * dense else ""))
    return head + "\n\n" + "\n".join(lines) + "\n\n" + caveat


def _span(rows) -> str:
    lo, hi = min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)
    return f"{lo:.2f}x" if lo == hi else f"{lo:.2f}x to {hi:.2f}x"
