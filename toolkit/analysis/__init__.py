"""What a Dataset's statistics suggest doing to the model, and doing it: per-cell allocations computed from a
Dataset (pure: :mod:`.allocation`), magnitude or Wanda pruning of a loaded model by such an allocation
(:mod:`.pruning`, :mod:`.wanda`)
and the perplexity that judges it (:mod:`.held_out`).

Arrows: analysis reads Datasets (``xarray``) and loaded models (:mod:`toolkit.activations`); nothing below it
imports it. :mod:`.allocation` does no I/O and needs no torch.

Public API
----------
alpha_allocation(ds, sparsity, ...) -> xarray.DataArray (layer, component)
    AlphaPruning's per-cell sparsity for a global budget (Lu et al. 2024).
pruned(model, allocation, norms=None) -> context manager
    Magnitude pruning (Wanda with input-feature norms, :mod:`.wanda`), undone on exit.
perplexity(loaded, text, ...) -> float
    Next-token perplexity on a text; :data:`HELD_OUT_TEXT` is the shipped held-out text.
"""

from __future__ import annotations

import importlib

from toolkit.analysis.allocation import alpha_allocation

__all__ = ["HELD_OUT_TEXT", "alpha_allocation", "perplexity", "pruned"]

_LAZY = {"pruned": "toolkit.analysis.pruning", "perplexity": "toolkit.analysis.held_out",
         "HELD_OUT_TEXT": "toolkit.analysis.held_out"}


def __getattr__(name: str):
    if name in _LAZY:  # torch and transformers only when asked for
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'toolkit.analysis' has no attribute {name!r}")
